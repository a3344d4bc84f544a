"""Drives single-turn episodes: prompts -> engine groups -> scored trajectories.

prompt ids (P) ─► engine.generate(n=G) ─► P x G completions
                                  └─► reward functions ─► Trajectory (P*G, prompt-major)

Multi-turn episodes run in ``rollout.episodes``; both are scored by
``score_trajectories`` (the outcome reward functions read the last turn).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from grouprl.rewards.scoring import RewardScores
from grouprl.rollout.base import RolloutEngine, SamplingSettings
from grouprl.types import Trajectory, Turn

ScoreFn = Callable[..., RewardScores]
"""``score(completions=..., rows=..., group_size=G) -> RewardScores`` (``RewardScorer``):
samples prompt-major, ``G`` per prompt (group rewards score each prompt's group)."""


class TimedScore:
    """A score function that adds up the seconds spent in it (``seconds``, resettable);
    ``close()`` closes the function's workers."""

    def __init__(self, fn: ScoreFn) -> None:
        self.fn, self.seconds = fn, 0.0

    def __call__(self, *args, **kwargs) -> RewardScores:
        t0 = time.perf_counter()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - t0

    def close(self) -> None:
        close = getattr(self.fn, "close", None)
        if close is not None:
            close()


def collect(
    *,
    engine: RolloutEngine,
    prompts: list[list[int]],
    rows: list[dict[str, Any]],
    settings: SamplingSettings,
    score: ScoreFn,
    correct_function: str | None,
) -> tuple[list[Trajectory], RewardScores]:
    """Generates ``settings.n`` samples per prompt and scores them.

    Trajectories are prompt-major: sample g of prompt p is at ``p * n + g``.
    """
    groups = engine.generate(prompts, settings)
    version = engine.weight_version
    trajectories = [
        Trajectory(
            prompt_index=row["_index"],
            prompt_ids=prompt,
            turns=[Turn(completion)],
            weight_version=version,
            row=row,
            stop_reason="answered" if completion.finish_reason == "stop" else "max_tokens",
        )
        for prompt, row, group in zip(prompts, rows, groups, strict=True)
        for completion in group
    ]
    scores = score_trajectories(
        trajectories, score=score, correct_function=correct_function, group_size=settings.n
    )
    return trajectories, scores


def score_trajectories(
    trajectories: list[Trajectory],
    *,
    score: ScoreFn,
    correct_function: str | None,
    group_size: int | None = None,
) -> RewardScores:
    """Runs the reward functions on each trajectory's last turn and records the results.
    ``group_size``: trajectories per prompt (prompt-major), for group rewards; None: runs
    of trajectories with the same row ``_index``."""
    scores = score(
        completions=[t.completion.text for t in trajectories],
        rows=[t.row for t in trajectories],
        group_size=group_size,
    )
    for i, traj in enumerate(trajectories):
        traj.reward = scores.total[i]
        traj.reward_parts = {name: values[i] for name, values in scores.parts.items()}
        if correct_function is not None and correct_function in scores.parts:
            traj.correct = scores.parts[correct_function][i] >= 1.0
    return scores
