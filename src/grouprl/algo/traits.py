"""What each advantage estimator needs and gives: one row per estimator. Imports no torch.

The config schema takes its choices for ``algo.advantage`` from this table, the config
checks read the traits (``rollout.n``, the critic, multi-turn episodes, GSPO), and
``grouprl plan`` prints the summaries. ``algo/advantages.py`` registers one function
per row, and a test holds the two to the same names. Adding an estimator is a function
there and a row here.
"""

from __future__ import annotations

from dataclasses import dataclass

ESTIMATOR_KEYS = (
    "scale_by_std",
    "adv_std",
    "adv_eps",
    "gamma",
    "gae_lambda",
    "turn_advantage_coef",
)
"""The ``algo`` keys that only some estimators read (each row's ``reads`` names its own);
a non-default value of one the chosen estimator does not read is refused at config time."""
_GROUP_STD = frozenset({"scale_by_std", "adv_std", "adv_eps"})  # group-normalised
_WHITENED = frozenset({"adv_std", "adv_eps"})  # whitened over the batch's tokens


@dataclass(frozen=True)
class EstimatorTraits:
    summary: str  # one line for `grouprl plan`
    reads: frozenset[str] = frozenset()  # the ESTIMATOR_KEYS its function reads
    min_group_size: int = 1  # 2: the baseline is the prompt's other samples
    token_returns: bool = False  # each token gets its own return, so per-token rewards
    # (algo.kl_in=reward) give the tokens of one sample different advantages
    per_token: bool = False  # the tokens of one sample get different advantages anyway
    needs_values: bool = False  # the critic's values (a critic: section)
    needs_turns: bool = False  # per-turn rewards of multi-turn episodes (env.name)


ESTIMATORS: dict[str, EstimatorTraits] = {
    "grpo": EstimatorTraits("group-centred rewards", reads=_GROUP_STD, min_group_size=2),
    "dr_grpo": EstimatorTraits("group mean-centred rewards, no std (Dr.GRPO)", min_group_size=2),
    "rloo": EstimatorTraits(
        "reward minus the mean of the prompt's other samples (leave-one-out)", min_group_size=2
    ),
    "reinforce_pp": EstimatorTraits(
        "returns whitened over the batch", reads=_WHITENED, token_returns=True
    ),
    "reinforce_pp_baseline": EstimatorTraits(
        "group-centred returns, then whitened over the batch",
        reads=_WHITENED,
        min_group_size=2,
        token_returns=True,
    ),
    "gae": EstimatorTraits(
        "generalised advantage estimation with the critic's values",
        reads=_WHITENED | {"gamma", "gae_lambda"},
        per_token=True,
        needs_values=True,
    ),
    "mt_grpo": EstimatorTraits(
        "group-normalised outcome, plus turn_advantage_coef x group-normalised turn reward "
        "on the turns up to the first tool result",
        reads=_GROUP_STD | {"turn_advantage_coef"},
        min_group_size=2,
        per_token=True,
        needs_turns=True,
    ),
    "turn_returns": EstimatorTraits(
        "discounted per-turn returns against the group's episode returns",
        reads=_GROUP_STD | {"gamma"},
        min_group_size=2,
        per_token=True,
        needs_turns=True,
    ),
}
"""Advantage estimators by ``algo.advantage`` name."""


def keys_read(advantage: str, *, scale_by_std: bool) -> frozenset[str]:
    """The ESTIMATOR_KEYS that ``advantage`` reads: its row's, less the std's
    (``adv_std``, ``adv_eps``) when a group-normalised estimator divides by no std."""
    reads = ESTIMATORS[advantage].reads
    if "scale_by_std" in reads and not scale_by_std:
        return reads - {"adv_std", "adv_eps"}
    return reads


def per_token_advantages(advantage: str, *, kl_rewards: bool) -> bool:
    """Whether ``advantage`` can give the tokens of one sample different values
    (``kl_rewards``: a per-token KL penalty is in the rewards, algo.kl_in=reward)."""
    traits = ESTIMATORS[advantage]
    return traits.per_token or (kl_rewards and traits.token_returns)
