"""The training objective for one micro-batch, assembled from the registries.

    loss = agg(policy_loss_BT + beta * kl_BT)

The loop calls ``micro_batch_loss`` without knowing which estimator, loss or
aggregation the config chose.
"""

from __future__ import annotations

import torch
from torch import Tensor

from grouprl.algo.aggregate import AGGREGATIONS, LossNorm, token_mean
from grouprl.algo.kl import KL_ESTIMATORS
from grouprl.algo.losses import POLICY_LOSSES
from grouprl.config.schema import AlgoConfig


def micro_batch_loss(
    *,
    logprobs_BT: Tensor,
    old_logprobs_BT: Tensor,
    ref_logprobs_BT: Tensor | None,
    advantages_BT: Tensor,
    loss_mask_BT: Tensor,
    norm: LossNorm,
    cfg: AlgoConfig,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Loss to backpropagate, plus metrics already divided by the mini-batch's
    token count (so the micro-batches' metrics add up to mini-batch means)."""
    mask_BT = loss_mask_BT.to(logprobs_BT.dtype)
    policy = POLICY_LOSSES[cfg.policy_loss](
        logprobs_BT=logprobs_BT,
        old_logprobs_BT=old_logprobs_BT,
        advantages_BT=advantages_BT,
        loss_mask_BT=loss_mask_BT,
        cfg=cfg,
    )
    loss_BT = policy.loss_BT
    metrics: dict[str, Tensor] = {}
    if cfg.beta > 0:
        if ref_logprobs_BT is None:
            raise ValueError("algo.beta > 0 needs reference logprobs in the batch")
        kl_BT = KL_ESTIMATORS[cfg.kl_estimator](logprobs_BT, ref_logprobs_BT)
        loss_BT = loss_BT + cfg.beta * kl_BT
        metrics["kl"] = token_mean(kl_BT.detach(), mask_BT, norm=norm)
    loss = AGGREGATIONS[cfg.loss_agg](loss_BT, mask_BT, norm=norm)
    with torch.no_grad():
        metrics["clip_frac"] = token_mean(policy.clipped_BT.to(mask_BT.dtype), mask_BT, norm=norm)
        metrics["policy_loss"] = token_mean(policy.loss_BT.detach(), mask_BT, norm=norm)
    return loss, metrics
