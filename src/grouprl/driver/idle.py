"""Steps that train no sample, and the streak of them that stops a run.

::

    train_step ─► which samples train (driver/batch.trained_samples)
        none ─► the streak + 1 ─► trainer.max_idle_steps in a row ─► CannotTrain("idle_steps"):
        │       the steps, why the last one's samples failed (counts by reason, the first
        │       errors), the fix
        some ─► the streak back to 0

One such step is a warning; a streak is a run that cannot train (failures the failure
brakes do not see, e.g. spread over several functions, or groups left too small). The
streak is ``RunState.idle_steps``: a checkpoint keeps it, so a resumed run counts on.
"""

from __future__ import annotations

from collections import Counter

from grouprl.rewards.failures import CannotTrain
from grouprl.rollout.reward import describe_sample
from grouprl.types import Trajectory

LISTED_DROPS = 3
"""Samples left out of training that a step's warning names; the rest are counted."""


def idle_streak(
    streak: int,
    *,
    trained: bool,
    trajectories: list[Trajectory],
    step: int,
    limit: int | None,
) -> int:
    """The steps in a row that trained no sample, after step ``step`` (``trained``: it
    trained some), from the ``streak`` before it. Raises ``CannotTrain`` when the streak
    reaches ``limit`` (``trainer.max_idle_steps``; None: never)."""
    if trained:
        return 0
    streak += 1
    if limit is not None and streak >= limit:
        first = step - streak + 1
        steps = f"step {step}" if streak == 1 else f"steps {first}-{step}"
        raise CannotTrain(
            f"{steps} trained no sample, {streak} in a row (trainer.max_idle_steps={limit}); "
            f"step {step}: {failed_samples(trajectories)}. Stopped: this run trains nothing. "
            "Fix: repair what fails (the reward function, environment or agent named "
            "above), or set reward.on_error / env.on_error=zero to train failed samples as "
            "reward 0, or raise trainer.max_idle_steps (null: never stop)",
            kind="idle_steps",
        )
    return streak


def failed_samples(trajectories: list[Trajectory]) -> str:
    """``5 failed samples left out of training (3 env_error, 2 reward_error): sample 4
    (prompt index 17): env_error: ...; ...; 2 more``: counts by reason, the first few."""
    failed = [i for i, t in enumerate(trajectories) if not t.trains]
    reasons = Counter(trajectories[i].reward_parts.failure for i in failed)
    counts = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items()))
    listed = [_describe_drop(trajectories[i], i) for i in failed[:LISTED_DROPS]]
    if len(failed) > LISTED_DROPS:
        listed.append(f"{len(failed) - LISTED_DROPS} more")
    return f"{len(failed)} failed samples left out of training ({counts}): " + "; ".join(listed)


def _describe_drop(traj: Trajectory, sample: int) -> str:
    """``sample 3 (prompt index 12): env_error: <the error, shortened>``."""
    error = traj.reward_parts.error
    said = f": {error[:200]}" if error else ""
    return f"{describe_sample(traj, sample)}: {traj.reward_parts.failure}{said}"
