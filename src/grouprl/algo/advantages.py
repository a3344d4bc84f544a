"""Advantage estimators: rewards of G samples per prompt -> one advantage per sample.

Signature of every estimator: ``fn(rewards_PG, *, cfg) -> advantages_PG`` where
``cfg`` is the ``AlgoConfig``. Suffixes: P prompts, G samples per prompt.
"""

from __future__ import annotations

from torch import Tensor

from grouprl.algo.registry import Registry
from grouprl.config.schema import AlgoConfig

ADVANTAGES: Registry = Registry("advantage estimator")


def group_normalized(rewards_PG: Tensor, *, scale_by_std: bool, eps: float) -> Tensor:
    """Reward minus the group mean, optionally divided by the group std + eps.

    The std is the population std (``unbiased=False``, divide by G), which
    departs from TRL and verl (they use ``torch.std``, the sample std, divide
    by G - 1), so each group's advantages have unit variance exactly: one
    success among G binary rewards scores +sqrt(G - 1), each failure
    -1/sqrt(G - 1). A group whose rewards are all equal gets zeros.
    """
    centered_PG = rewards_PG - rewards_PG.mean(dim=1, keepdim=True)
    if not scale_by_std:
        return centered_PG
    return centered_PG / (rewards_PG.std(dim=1, keepdim=True, unbiased=False) + eps)


@ADVANTAGES.register("grpo")
def grpo(rewards_PG: Tensor, *, cfg: AlgoConfig) -> Tensor:
    """GRPO outcome advantage (DeepSeekMath, Shao et al. 2024), same for every token."""
    return group_normalized(rewards_PG, scale_by_std=cfg.scale_by_std, eps=cfg.adv_eps)
