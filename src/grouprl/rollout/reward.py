"""The reward of a sample: computed here, and only here, from its named parts.

    reward functions on the last turn (rollout/runner.py) ─► scores, functions ─┐
    env.agent's own reward (rollout/gateway/agents.py) ─────► agent ────────────┤
    a failed environment or agent (setup.py, agents.py) ─────► failure ──────────┼─► RewardParts
    DAPO's overlong shaping (driver/loop.py) ─────────────────► overlong ─────────┘   │
                                                              sample_reward(parts) ◄─┘
                                                                       │
                                            Trajectory.reward (what the estimators score)

Suppliers call ``record_parts`` (or ``fail``); nothing else writes ``Trajectory.reward``.
Per-turn rewards and KL in the reward are recorded too (``turns``, ``kl``), for
samples.jsonl: the estimators take them per turn and per token, not in this sum.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from grouprl.types import RewardParts, Trajectory

FAILED_OUTCOME = 0.0
"""The outcome of a sample whose environment or agent failed: it trains as this reward.
What becomes of failed samples is decided here (and by ``RewardParts.failure``)."""


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


def record_parts(traj: Trajectory, **parts: Any) -> None:
    """Sets named parts of ``traj``'s reward (fields of ``RewardParts``; the others kept)
    and recomputes ``traj.reward`` from all of them."""
    traj.reward_parts = replace(traj.reward_parts, **parts)
    traj.reward = sample_reward(traj.reward_parts)


def fail(traj: Trajectory, *, reason: str) -> None:
    """A sample whose environment or agent failed (``reason``: ``env_error``): its
    outcome is ``FAILED_OUTCOME``, whatever its last turn scored (the failure is not the
    policy's to learn from); the scores show 0 and it is not correct."""
    scores = dict.fromkeys(traj.reward_parts.scores, FAILED_OUTCOME)
    record_parts(traj, failure=reason, scores=scores, functions=FAILED_OUTCOME, agent=None)
    traj.correct = False
