"""The training objective for one micro-batch, assembled from the registries.

    loss = agg(h * w * policy_loss_BT + beta * c * kl_BT + d * fkl_BT) - e * agg(H_BT)

``w`` is the off-policy correction's weight (``algo.correction``, registry
``algo.corrections.CORRECTIONS``: a function of pi_prox / pi_behav per token, without
gradient; 1 for ``none``) and the KL term is present when ``algo.kl_in=loss``. ``c`` is 1, or with
``algo.kl_bias_correction`` the policy loss's importance ratio pi / pi_old with its
gradient (TRL's ``use_bias_correction_kl``, on by default in TRL 1.16; DeepSeek-V3.2):
the KL gradient is then the unbiased reverse-KL gradient. The ``kl`` metric is the
estimate before that factor. ``h`` keeps only the high-entropy tokens
(``algo.top_entropy_quantile``; 1 on every token by default) and ``e`` is the entropy
bonus's coefficient on the policy's token entropy H (``algo/entropy.py``). ``fkl_BT`` is
the forward KL from the distillation teacher's top k at each token
(``algo.teacher_top_k``, ``algo/distill.top_k_forward_kl``), weighted by d =
``algo.teacher_coef``: a supervised term at the states the sampler visited, neither
importance-weighted nor clipped (GKD's on-policy loss). The loop calls
``micro_batch_loss`` without knowing which estimator, loss or aggregation the config chose.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from grouprl.algo.aggregate import AGGREGATIONS, LossNorm, token_mean
from grouprl.algo.corrections import (
    CORRECTIONS,
    TIS_CAP,
    CorrectionInputs,
    CorrectionParams,
    correction_name,
)
from grouprl.algo.entropy import high_entropy_mask
from grouprl.algo.kl import KL_ESTIMATORS
from grouprl.algo.losses import POLICY_LOSSES, ClipParams


class ObjectiveParams(ClipParams, CorrectionParams, Protocol):
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
    def correction(self) -> str: ...
    @property
    def top_entropy_quantile(self) -> float: ...


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
    m2po_cutoff: float | None = None,
    entropy_BT: Tensor | None = None,
    entropy_coef: float = 0.0,
    forward_kl_BT: Tensor | None = None,
    teacher_coef: float = 0.0,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Loss to backpropagate, plus metrics already divided by the mini-batch's
    token count (so the micro-batches' metrics add up to mini-batch means).
    ``beta`` is the current KL coefficient (``algo.beta``, or the adaptive one).
    ``old_logprobs_BT`` is pi_prox and ``engine_logprobs_BT`` pi_behav of the correction;
    ``m2po_cutoff`` is ``algo.correction=m2po``'s bound over the whole step's batch.
    ``entropy_BT``: the policy's token entropy (with its gradient when ``entropy_coef`` > 0),
    needed by the bonus and by ``algo.top_entropy_quantile`` < 1. ``forward_kl_BT``: the
    forward KL from the teacher's top k (with its gradient), weighted by ``teacher_coef``."""
    mask_BT = loss_mask_BT.to(logprobs_BT.dtype)
    policy = POLICY_LOSSES[cfg.policy_loss](
        logprobs_BT=logprobs_BT,
        old_logprobs_BT=old_logprobs_BT,
        advantages_BT=advantages_BT,
        loss_mask_BT=loss_mask_BT,
        cfg=cfg,
    )
    name = correction_name(cfg)
    correction = CORRECTIONS[name](
        CorrectionInputs(old_logprobs_BT, engine_logprobs_BT, loss_mask_BT, m2po_cutoff),
        cfg=cfg,
    )
    weight_BT = correction.weight_BT.to(mask_BT.dtype)
    loss_BT = policy.loss_BT * weight_BT  # x * 1.0 is x: `none` leaves the loss as it was
    if cfg.top_entropy_quantile < 1.0:
        assert entropy_BT is not None, "algo.top_entropy_quantile needs the token entropy"
        high_BT = high_entropy_mask(entropy_BT, loss_mask_BT, keep=cfg.top_entropy_quantile)
        loss_BT = loss_BT * high_BT
    metrics = _correction_metrics(name, weight_BT, correction.masked_BT, mask_BT, norm, cfg)
    if cfg.kl_in == "loss" and beta > 0:
        if ref_logprobs_BT is None:
            raise ValueError("a KL term in the loss needs reference logprobs in the batch")
        kl_BT = KL_ESTIMATORS[cfg.kl_estimator](logprobs_BT, ref_logprobs_BT)
        metrics["kl"] = token_mean(kl_BT.detach(), mask_BT, norm=norm)
        if cfg.kl_bias_correction:
            kl_BT = kl_BT * policy.ratio_BT
        loss_BT = loss_BT + beta * kl_BT
    if forward_kl_BT is not None:
        metrics["distill/forward_kl"] = token_mean(forward_kl_BT.detach(), mask_BT, norm=norm)
        loss_BT = loss_BT + teacher_coef * forward_kl_BT
    loss = AGGREGATIONS[cfg.loss_agg](loss_BT, mask_BT, norm=norm)
    if entropy_coef > 0:
        assert entropy_BT is not None, "the entropy bonus needs the token entropy"
        loss = loss - entropy_coef * AGGREGATIONS[cfg.loss_agg](entropy_BT, mask_BT, norm=norm)
    with torch.no_grad():
        metrics["clip_frac"] = token_mean(policy.clipped_BT.to(mask_BT.dtype), mask_BT, norm=norm)
        metrics["policy_loss"] = token_mean(policy.loss_BT.detach(), mask_BT, norm=norm)
    return loss, metrics


def _correction_metrics(
    name: str,
    weight_BT: Tensor,
    masked_BT: Tensor,
    mask_BT: Tensor,
    norm: LossNorm,
    cfg: ObjectiveParams,
) -> dict[str, Tensor]:
    """The correction's mean weight and share of masked tokens (and, for ``tis``, under
    the names TIS has always logged)."""
    metrics = {
        "correction/weight": token_mean(weight_BT, mask_BT, norm=norm),
        "correction/masked_frac": token_mean(masked_BT.to(mask_BT.dtype), mask_BT, norm=norm),
    }
    if name == "tis":
        cap = cfg.tis_cap if cfg.tis_cap is not None else TIS_CAP
        metrics["tis/weight"] = metrics["correction/weight"]
        metrics["tis/capped_frac"] = token_mean(
            (weight_BT >= cap).to(mask_BT.dtype), mask_BT, norm=norm
        )
    return metrics
