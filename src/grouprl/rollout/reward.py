"""The reward of a sample: computed here, and only here, from its named parts.

    reward functions on the last turn (rollout/episode_scores.py) ─► scores, functions ─┐
    env.agent's own reward (rollout/gateway/agents.py) ─────► agent ────────────┤
    a failed environment, agent or reward (``fail``) ────────► failure, dropped ─┼─► RewardParts
    DAPO's overlong shaping (driver/loop.py) ────────────────► overlong ─────────┘       │
                                                  sample_reward(parts) ◄───────────────┘
                                                           │
                   Trajectory.reward (what the estimators score), Trajectory.trains

Suppliers call ``record_parts`` (or ``fail``); nothing else writes ``Trajectory.reward``.
Per-turn rewards and KL in the reward are recorded too (``turns``, ``kl``), for
samples.jsonl: the estimators take them per turn and per token, not in this sum.

A failed sample never trains on what it scored; ``fail`` applies ``env.on_error`` or
``reward.on_error``, and is the one place that stops a run on ``raise``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import get_args

from grouprl.config.containment import OnError
from grouprl.types import RewardParts, Trajectory

FAILED_OUTCOME = 0.0
"""The outcome of a failed sample (shown in its reward; what it trains as with
``on_error=zero``)."""

ON_ERROR_KEYS = {
    "env_error": "env.on_error",
    "agent_error": "env.on_error",
    "reward_error": "reward.on_error",
}
"""Each failure reason and the config key that decides what becomes of such a sample."""
_FAILED_PART = {
    "env_error": "environment",
    "agent_error": "agent",
    "reward_error": "reward function",
}


class SampleFailed(RuntimeError):
    """A sample failed under ``on_error=raise``; the message names the sample, its prompt
    index, the reason, the error and the key that decides."""

    user_error = True


def sample_reward(parts: RewardParts) -> float:
    """The sample's reward: its outcome (the agent's reward if it gave one, else the reward
    functions' weighted sum; ``FAILED_OUTCOME`` for a failed sample), plus the overlong
    shaping when it applies. ``scores``, ``turns`` and ``kl`` are not in it."""
    if parts.failure is not None:
        outcome = FAILED_OUTCOME
    elif parts.agent is not None:
        outcome = parts.agent
    else:
        outcome = parts.functions
    if parts.overlong is not None:
        outcome += parts.overlong
    return outcome


def record_parts(traj: Trajectory, **parts: object) -> None:
    """Sets named parts of ``traj``'s reward (fields of ``RewardParts``; the others kept)
    and recomputes ``traj.reward`` from all of them."""
    traj.reward_parts = replace(traj.reward_parts, **parts)
    traj.reward = sample_reward(traj.reward_parts)


def fail(
    traj: Trajectory,
    *,
    reason: str,
    on_error: OnError = "drop",
    message: str = "",
    sample: int | None = None,
) -> None:
    """A sample whose environment, agent or reward function failed (``reason``:
    ``env_error``, ``agent_error``, ``reward_error``). Its outcome is ``FAILED_OUTCOME``,
    whatever its last turn scored; the scores show 0, its per-turn rewards are gone
    (``turns``: the turn-level estimators read none, ``driver/batch.turn_tensors``) and it
    is not correct. ``on_error`` (the value of ``ON_ERROR_KEYS[reason]``): ``drop`` leaves
    it out of training (``traj.trains`` is False), ``zero`` trains it as
    ``FAILED_OUTCOME``, ``raise`` raises ``SampleFailed``. ``message``: the error;
    ``sample``: its index in the step, for the message.

    A sample that failed already (its environment, then a reward function on what the
    broken episode left) keeps the stricter fate of the two, ``raise`` over ``drop`` over
    ``zero``: a failure never makes a sample train that another failure left out. It
    keeps its FIRST failure's reason and error (the one ``failures/*`` counts once)."""
    if reason not in ON_ERROR_KEYS or on_error not in get_args(OnError):
        raise ValueError(
            f"fail(reason={reason!r}, on_error={on_error!r}): reason is one of "
            f"{sorted(ON_ERROR_KEYS)}, on_error one of {list(get_args(OnError))}"
        )
    if on_error == "raise":
        raise SampleFailed(_raised(traj, reason=reason, message=message, sample=sample))
    before = traj.reward_parts
    if before.failure is not None:  # failed twice: the first reason, the stricter fate
        record_parts(traj, dropped=bool(before.dropped) or on_error == "drop")
        return
    scores = dict.fromkeys(before.scores, FAILED_OUTCOME)
    record_parts(
        traj,
        failure=reason,
        dropped=on_error == "drop",
        error=message or None,
        scores=scores,
        functions=FAILED_OUTCOME,
        agent=None,
        turns=(),
    )
    traj.correct = False


def describe_sample(traj: Trajectory, sample: int | None) -> str:
    """``sample 3 (prompt index 12)``, or ``a sample of prompt index 12`` without its index."""
    if sample is None:
        return f"a sample of prompt index {traj.prompt_index}"
    return f"sample {sample} (prompt index {traj.prompt_index})"


def _raised(traj: Trajectory, *, reason: str, message: str, sample: int | None) -> str:
    key, part = ON_ERROR_KEYS[reason], _FAILED_PART[reason]
    error = f": {message}" if message else ""
    return (
        f"{describe_sample(traj, sample)} failed ({reason}){error}. {key}=raise stops the "
        f"run at the first failed sample: fix the {part}, or set {key}=drop to leave such "
        f"samples out of training (or {key}=zero to train them as reward {FAILED_OUTCOME:g})."
    )
