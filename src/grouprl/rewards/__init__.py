"""Reward functions (pure Python) and safe scoring of completions with them."""

from grouprl.rewards.format import format_reward
from grouprl.rewards.math import extract_answer, math_answer, normalize_number
from grouprl.rewards.registry import (
    REWARD_FUNCTIONS,
    RewardError,
    register_reward,
    resolve_reward,
    resolve_rewards,
)
from grouprl.rewards.scoring import (
    RewardFailure,
    RewardRunner,
    RewardScores,
    metrics,
    score_completions,
)

__all__ = [
    "REWARD_FUNCTIONS",
    "RewardError",
    "RewardFailure",
    "RewardRunner",
    "RewardScores",
    "extract_answer",
    "format_reward",
    "math_answer",
    "metrics",
    "normalize_number",
    "register_reward",
    "resolve_reward",
    "resolve_rewards",
    "score_completions",
]
