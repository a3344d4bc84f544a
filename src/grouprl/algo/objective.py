"""The training objective for one micro-batch, assembled from the registries.

    loss = agg(w * policy_loss_BT + beta * c * kl_BT)

``w`` is the truncated importance weight (``algo.tis_cap``; 1 otherwise) and the
KL term is present when ``algo.kl_in=loss``. ``c`` is 1, or with
``algo.kl_bias_correction`` the policy loss's importance ratio pi / pi_old with its
gradient (TRL's ``use_bias_correction_kl``, on by default in TRL 1.16; DeepSeek-V3.2):
the KL gradient is then the unbiased reverse-KL gradient. The ``kl`` metric is the
estimate before that factor. The loop calls ``micro_batch_loss`` without knowing which
estimator, loss or aggregation the config chose.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from grouprl.algo.aggregate import AGGREGATIONS, LossNorm, token_mean
from grouprl.algo.kl import KL_ESTIMATORS
from grouprl.algo.losses import POLICY_LOSSES, ClipParams


class ObjectiveParams(ClipParams, Protocol):
    """The ``algo`` keys the objective reads (and its policy loss's); read-only, so
    ``AlgoConfig``, whose choices are ``Literal`` types, satisfies it."""

    @property
    def policy_loss(self) -> str: ...
    @property
    def loss_agg(self) -> str: ...
    @property
    def kl_in(self) -> str: ...
    @property
    def kl_estimator(self) -> str: ...
    @property
    def kl_bias_correction(self) -> bool: ...
    @property
    def tis_cap(self) -> float | None: ...


def truncated_importance_weight(
    sampler_logprobs_BT: Tensor, engine_logprobs_BT: Tensor, *, cap: float
) -> Tensor:
    """Truncated importance sampling (Yao et al. 2025, "Your Efficient RL Framework
    Secretly Brings You Off-Policy RL Training"): the engine sampled from pi_engine
    but the loss assumes the trainer's pi_old; each token is reweighted by

        w_t = min(pi_old(y_t) / pi_engine(y_t), C)

    without gradient. ``sampler_logprobs_BT`` are the trainer's logprobs of the
    sampling policy's weights.
    """
    return (sampler_logprobs_BT - engine_logprobs_BT).exp().clamp(max=cap).detach()


def micro_batch_loss(
    *,
    logprobs_BT: Tensor,
    old_logprobs_BT: Tensor,
    ref_logprobs_BT: Tensor | None,
    engine_logprobs_BT: Tensor,
    advantages_BT: Tensor,
    loss_mask_BT: Tensor,
    norm: LossNorm,
    cfg: ObjectiveParams,
    beta: float,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Loss to backpropagate, plus metrics already divided by the mini-batch's
    token count (so the micro-batches' metrics add up to mini-batch means).
    ``beta`` is the current KL coefficient (``algo.beta``, or the adaptive one)."""
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
    if cfg.tis_cap is not None:
        weight_BT = truncated_importance_weight(
            old_logprobs_BT, engine_logprobs_BT, cap=cfg.tis_cap
        )
        loss_BT = loss_BT * weight_BT
        metrics["tis/weight"] = token_mean(weight_BT, mask_BT, norm=norm)
        metrics["tis/capped_frac"] = token_mean(
            (weight_BT >= cfg.tis_cap).to(mask_BT.dtype), mask_BT, norm=norm
        )
    if cfg.kl_in == "loss" and beta > 0:
        if ref_logprobs_BT is None:
            raise ValueError("a KL term in the loss needs reference logprobs in the batch")
        kl_BT = KL_ESTIMATORS[cfg.kl_estimator](logprobs_BT, ref_logprobs_BT)
        metrics["kl"] = token_mean(kl_BT.detach(), mask_BT, norm=norm)
        if cfg.kl_bias_correction:
            kl_BT = kl_BT * policy.ratio_BT
        loss_BT = loss_BT + beta * kl_BT
    loss = AGGREGATIONS[cfg.loss_agg](loss_BT, mask_BT, norm=norm)
    with torch.no_grad():
        metrics["clip_frac"] = token_mean(policy.clipped_BT.to(mask_BT.dtype), mask_BT, norm=norm)
        metrics["policy_loss"] = token_mean(policy.loss_BT.detach(), mask_BT, norm=norm)
    return loss, metrics
