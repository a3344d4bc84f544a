"""Reward shaping that depends on the completion, not on the task."""

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
