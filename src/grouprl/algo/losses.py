"""Policy losses: per-token surrogate losses, before aggregation.

Signature: ``fn(*, logprobs_BT, old_logprobs_BT, advantages_BT, loss_mask_BT, cfg)
-> PolicyLoss``. Suffixes: B samples, T tokens. ``loss_mask_BT`` marks the
generated tokens; sequence-level losses use it to form per-sequence ratios, and
every loss returns values for all positions (the aggregation masks them).

Log ratios are bounded before ``exp``, as verl does, so one token far off the old
policy cannot give a gradient of order 1e10: token ratios clamp log(pi / pi_old) to
[-20, 20] (``LOG_RATIO_BOUND``; verl's ``compute_policy_loss_vanilla``), GSPO's
sequence ratios clamp it at 10 above (``SEQUENCE_LOG_RATIO_MAX``; verl's
``compute_policy_loss_gspo``). A clamped log ratio passes no gradient, so such a
token drops out of the update. TRL bounds neither.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from grouprl.algo.registry import Registry

POLICY_LOSSES: Registry = Registry("policy loss")

LOG_RATIO_BOUND = 20.0  # |log(pi / pi_old)| of a token ratio at most (exp(20) = 4.9e8)
SEQUENCE_LOG_RATIO_MAX = 10.0  # GSPO's sequence log ratio at most (exp(10) = 2.2e4)


class ClipParams(Protocol):
    """The ``algo`` keys the policy losses read (read-only: ``AlgoConfig`` satisfies it)."""

    @property
    def clip_eps_low(self) -> float: ...
    @property
    def clip_eps_high(self) -> float: ...
    @property
    def dual_clip_c(self) -> float | None: ...
    @property
    def cov_ratio(self) -> float: ...
    @property
    def clip_cov_bounds(self) -> tuple[float, float]: ...
    @property
    def kl_cov_coef(self) -> float: ...


@dataclass
class PolicyLoss:
    loss_BT: Tensor  # per-token loss, to be aggregated under the loss mask
    clipped_BT: Tensor  # bool: the clip was active (gradient zero) on this token
    ratio_BT: Tensor  # the (bounded) importance ratio each token's loss used, with gradient


def _clipped_surrogate(ratio: Tensor, adv: Tensor, cfg: ClipParams) -> tuple[Tensor, Tensor]:
    """-min(ratio * A, clip(ratio, 1 - eps_low, 1 + eps_high) * A) and where the clip won."""
    unclipped = ratio * adv
    clipped = ratio.clamp(1 - cfg.clip_eps_low, 1 + cfg.clip_eps_high) * adv
    return -torch.minimum(unclipped, clipped), clipped < unclipped


@POLICY_LOSSES.register("ppo_clip")
def ppo_clip(
    *,
    logprobs_BT: Tensor,
    old_logprobs_BT: Tensor,
    advantages_BT: Tensor,
    loss_mask_BT: Tensor,
    cfg: ClipParams,
) -> PolicyLoss:
    """PPO's clipped surrogate on token ratios (as in GRPO):

        ratio = exp(clamp(logp - logp_old, -20, 20))
        loss  = -min(ratio * A, clip(ratio, 1 - eps_low, 1 + eps_high) * A)

    With separate low/high clip ranges (DAPO's clip-higher when eps_high > eps_low).
    With ``cfg.dual_clip_c = c`` (c > 1), dual-clip PPO (Ye et al. 2020, "Mastering
    Complex Control in MOBA Games"): for A < 0 the loss is capped at -c * A, so a
    token whose ratio has grown far past 1 + eps cannot push an unbounded update.
    """
    del loss_mask_BT
    log_ratio_BT = (logprobs_BT - old_logprobs_BT).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    ratio_BT = log_ratio_BT.exp()
    loss_BT, clipped_BT = _clipped_surrogate(ratio_BT, advantages_BT, cfg)
    if cfg.dual_clip_c is not None:
        cap_BT = -cfg.dual_clip_c * advantages_BT
        dual_BT = (advantages_BT < 0) & (loss_BT > cap_BT)
        loss_BT = torch.where(dual_BT, cap_BT, loss_BT)
        clipped_BT = clipped_BT | dual_BT
    return PolicyLoss(loss_BT=loss_BT, clipped_BT=clipped_BT, ratio_BT=ratio_BT)


def _sequence_log_ratio(
    logprobs_BT: Tensor, old_logprobs_BT: Tensor, mask_BT: Tensor
) -> tuple[Tensor, Tensor]:
    """Mean over each sequence's masked tokens of logp - logp_old, and the token counts."""
    diff_BT = torch.where(mask_BT, logprobs_BT - old_logprobs_BT, 0.0)
    count_B = mask_BT.sum(dim=1).clamp(min=1)
    return diff_BT.sum(dim=1) / count_B, count_B


@POLICY_LOSSES.register("gspo")
def gspo(
    *,
    logprobs_BT: Tensor,
    old_logprobs_BT: Tensor,
    advantages_BT: Tensor,
    loss_mask_BT: Tensor,
    cfg: ClipParams,
) -> PolicyLoss:
    """GSPO (Zheng et al. 2025, "Group Sequence Policy Optimization"): one ratio per
    sequence, the geometric mean of its token ratios, clipped per sequence:

        s_i    = exp(min(1/|y_i| sum_t (logp_t - logp_old_t), 10))
        loss_i = -min(s_i * A_i, clip(s_i, 1 - eps_low, 1 + eps_high) * A_i)

    ``loss_i`` is written to every token of sequence i, so ``seq_mean_token_mean``
    gives the paper's 1/G sum_i objective (``token_mean`` weighs sequences by length).
    ``A_i`` is the masked mean of the sequence's token advantages (they are
    constant for outcome rewards); use ``gspo_token`` when they differ.
    The paper's clip ranges are far smaller than PPO's: eps_low = 3e-4,
    eps_high = 4e-4 (set them in the recipe).
    """
    mask_BT = loss_mask_BT.bool()
    log_s_B, count_B = _sequence_log_ratio(logprobs_BT, old_logprobs_BT, mask_BT)
    adv_B = torch.where(mask_BT, advantages_BT, 0.0).sum(dim=1) / count_B
    s_B = log_s_B.clamp(max=SEQUENCE_LOG_RATIO_MAX).exp()
    loss_B, clipped_B = _clipped_surrogate(s_B, adv_B, cfg)
    return PolicyLoss(
        loss_BT=loss_B[:, None].expand_as(logprobs_BT),
        clipped_BT=clipped_B[:, None] & mask_BT,
        ratio_BT=s_B[:, None].expand_as(logprobs_BT),
    )


@POLICY_LOSSES.register("gspo_token")
def gspo_token(
    *,
    logprobs_BT: Tensor,
    old_logprobs_BT: Tensor,
    advantages_BT: Tensor,
    loss_mask_BT: Tensor,
    cfg: ClipParams,
) -> PolicyLoss:
    """GSPO-token (Zheng et al. 2025, eq. 13): per-token ratios whose value is the
    sequence ratio but whose gradient flows through each token's own logprob:

        s_i,t  = exp(min(sg[log s_i] + logp_t - sg[logp_t], 10))
        loss_t = -min(s_i,t * A_i,t, clip(s_i,t, 1 - eps_low, 1 + eps_high) * A_i,t)

    so per-token advantages may differ. When A is constant over a sequence, the
    loss values and the gradient (summed over the sequence's tokens) equal
    ``gspo``'s. Paper clip ranges: eps_low = 3e-4, eps_high = 4e-4.
    """
    mask_BT = loss_mask_BT.bool()
    log_s_B, _ = _sequence_log_ratio(logprobs_BT, old_logprobs_BT, mask_BT)
    log_ratio_BT = log_s_B.detach()[:, None] + logprobs_BT - logprobs_BT.detach()
    ratio_BT = log_ratio_BT.clamp(max=SEQUENCE_LOG_RATIO_MAX).exp()
    loss_BT, clipped_BT = _clipped_surrogate(ratio_BT, advantages_BT, cfg)
    return PolicyLoss(loss_BT=loss_BT, clipped_BT=clipped_BT & mask_BT, ratio_BT=ratio_BT)


def _centred_cov(logprobs_BT: Tensor, advantages_BT: Tensor, mask_BT: Tensor) -> Tensor:
    """Each loss token's (A_t - mean A) (logp_t - mean logp), the means over the mask's
    tokens, without gradient; -inf off the mask."""
    logp_BT = logprobs_BT.detach()
    n = mask_BT.sum().clamp(min=1)
    mean_adv = (advantages_BT * mask_BT).sum() / n
    mean_logp = (logp_BT * mask_BT).sum() / n
    cov_BT = (advantages_BT - mean_adv) * (logp_BT - mean_logp)
    return torch.where(mask_BT, cov_BT, -torch.inf)


@POLICY_LOSSES.register("clip_cov")
def clip_cov(
    *,
    logprobs_BT: Tensor,
    old_logprobs_BT: Tensor,
    advantages_BT: Tensor,
    loss_mask_BT: Tensor,
    cfg: ClipParams,
) -> PolicyLoss:
    """Clip-Cov (Cui et al. 2025, "The Entropy Mechanism of Reinforcement Learning for
    Reasoning Language Models", arXiv:2505.22617): ``ppo_clip``'s loss, and besides, of the
    tokens the clip left active whose covariance

        cov_t = (A_t - mean A) (logp_t - mean logp)        (means over the loss tokens)

    lies strictly inside ``cfg.clip_cov_bounds``, k = max(1, int(cov_ratio * n)) drawn at
    random (n: the loss tokens) lose their loss and gradient: the updates that lower the
    entropy most. The draw is seeded by n, so a run repeats. Means and n are the
    micro-batch's, as in verl."""
    base = ppo_clip(
        logprobs_BT=logprobs_BT,
        old_logprobs_BT=old_logprobs_BT,
        advantages_BT=advantages_BT,
        loss_mask_BT=loss_mask_BT,
        cfg=cfg,
    )
    mask_BT = loss_mask_BT.bool()
    low, high = cfg.clip_cov_bounds
    cov_BT = _centred_cov(logprobs_BT, advantages_BT, mask_BT)
    band_N = (mask_BT & ~base.clipped_BT & (cov_BT > low) & (cov_BT < high)).flatten()
    candidates = band_N.nonzero().squeeze(1)
    n = int(mask_BT.sum())
    k = min(max(int(cfg.cov_ratio * n), 1), candidates.numel())
    draw = torch.randperm(candidates.numel(), generator=torch.Generator().manual_seed(n))
    held_N = torch.zeros_like(band_N)
    held_N[candidates[draw[:k].to(candidates.device)]] = True
    held_BT = held_N.view_as(mask_BT)
    return PolicyLoss(
        loss_BT=torch.where(held_BT, 0.0, base.loss_BT),
        clipped_BT=base.clipped_BT | held_BT,
        ratio_BT=base.ratio_BT,
    )


@POLICY_LOSSES.register("kl_cov")
def kl_cov(
    *,
    logprobs_BT: Tensor,
    old_logprobs_BT: Tensor,
    advantages_BT: Tensor,
    loss_mask_BT: Tensor,
    cfg: ClipParams,
) -> PolicyLoss:
    """KL-Cov (Cui et al. 2025, arXiv:2505.22617): no clip; every token's loss is the
    policy gradient's -ratio * A, and the k = max(1, int(cov_ratio * n)) loss tokens of
    largest covariance (``clip_cov``'s cov_t) add ``cfg.kl_cov_coef`` * |logp - logp_old|,
    holding back the updates that lower the entropy most."""
    mask_BT = loss_mask_BT.bool()
    log_ratio_BT = (logprobs_BT - old_logprobs_BT).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    ratio_BT = log_ratio_BT.exp()
    loss_BT = -ratio_BT * advantages_BT
    n = int(mask_BT.sum())
    held_N = torch.zeros(mask_BT.numel(), dtype=torch.bool, device=mask_BT.device)
    if n:
        k = max(int(cfg.cov_ratio * n), 1)
        held_N[_centred_cov(logprobs_BT, advantages_BT, mask_BT).flatten().topk(k).indices] = True
    held_BT = held_N.view_as(mask_BT)
    loss_BT = torch.where(held_BT, loss_BT + cfg.kl_cov_coef * log_ratio_BT.abs(), loss_BT)
    return PolicyLoss(loss_BT=loss_BT, clipped_BT=torch.zeros_like(mask_BT), ratio_BT=ratio_BT)
