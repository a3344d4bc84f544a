"""Reward functions (pure Python) and contained scoring of completions with them (in
worker processes with a deadline and a memory limit per call: ``scoring``; failed calls,
the failure brake, ``CannotTrain`` and their warnings: ``failures``).

The names load on first use (PEP 562): a reward worker process imports only the
modules its functions need, so a replaced worker starts in a fraction of a second.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grouprl.lazy import lazy_getattr

_NAMES = {
    "CannotTrain": ".failures",
    "FailureBrake": ".failures",
    "format_reward": ".format",
    "extract_answer": ".math",
    "math_answer": ".math",
    "normalize_number": ".math",
    "REWARD_FUNCTIONS": ".registry",
    "Reward": ".registry",
    "RewardError": ".registry",
    "register_reward": ".registry",
    "resolve_reward": ".registry",
    "resolve_rewards": ".registry",
    "RewardFailure": ".failures",
    "RewardScorer": ".scoring",
    "RewardScores": ".scoring",
    "metrics": ".scoring",
}
__all__ = [
    "REWARD_FUNCTIONS",
    "CannotTrain",
    "FailureBrake",
    "Reward",
    "RewardError",
    "RewardFailure",
    "RewardScorer",
    "RewardScores",
    "extract_answer",
    "format_reward",
    "math_answer",
    "metrics",
    "normalize_number",
    "register_reward",
    "resolve_reward",
    "resolve_rewards",
]

if TYPE_CHECKING:
    from grouprl.rewards.failures import CannotTrain, FailureBrake, RewardFailure
    from grouprl.rewards.format import format_reward
    from grouprl.rewards.math import extract_answer, math_answer, normalize_number
    from grouprl.rewards.registry import (
        REWARD_FUNCTIONS,
        Reward,
        RewardError,
        register_reward,
        resolve_reward,
        resolve_rewards,
    )
    from grouprl.rewards.scoring import (
        RewardScorer,
        RewardScores,
        metrics,
    )


__getattr__ = lazy_getattr(__name__, _NAMES)
