"""Reward shaping that depends on the completion, not on the task, and the per-step
choices of DAPO (dynamic sampling) and PPO (critic warm-up): pure functions the loop
calls in a fixed order."""

from __future__ import annotations


def overlong_penalty(length: int, *, max_tokens: int, buffer: int, factor: float) -> float:
    """DAPO's soft overlong punishment (Yu et al. 2025, eq. 13), added to the reward:

        0                                  if |y| <= L_max - L_cache
        (L_max - L_cache - |y|) / L_cache  if L_max - L_cache < |y| <= L_max
        -1                                 if |y| > L_max

    times ``factor``; L_max = ``max_tokens``, L_cache = ``buffer``. The engine never
    generates past ``max_tokens``, so the last case only guards the arithmetic.
    """
    expected = max_tokens - buffer
    if length <= expected:
        return 0.0
    return factor * max(-1.0, (expected - length) / buffer)


def signal_groups(
    rewards: list[float], *, group_size: int, trains: list[bool] | None = None
) -> list[bool]:
    """DAPO's dynamic-sampling test, per group of ``group_size`` consecutive samples:
    whether the rewards of its samples that train (``trains``; None: all) differ. A group
    whose rewards are all equal has zero advantage under a group baseline and adds no
    gradient; neither does one with fewer than two samples that train."""
    trains = [True] * len(rewards) if trains is None else trains
    kept = [r if t else None for r, t in zip(rewards, trains, strict=True)]
    return [
        len(set(kept[start : start + group_size]) - {None}) > 1
        for start in range(0, len(rewards), group_size)
    ]


def policy_learns(step: int, *, critic_warmup_steps: int) -> bool:
    """PPO's critic warm-up: the first ``critic_warmup_steps`` steps train the critic
    alone, so the policy's first advantages come from a fitted value model."""
    return step > critic_warmup_steps
