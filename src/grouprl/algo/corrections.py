"""Off-policy corrections: per-token weights on the policy loss, chosen by ``algo.correction``.

Three policies meet in an asynchronous (or numerically mismatched) step:

    pi_behav  the engine that sampled each token (``engine_logprobs_BT``; a token's own
              weight version, in the engine's numerics)
    pi_prox   the trainer's policy before this step's first update (``old_logprobs_BT``;
              for a single update the current policy, detached)
    pi_theta  the policy being trained (with gradient)

The policy loss (``algo.policy_loss``) is PPO's surrogate on pi_theta / pi_prox; a
correction reweights each token's surrogate by ``w_t``, a function of

    r_t = pi_prox(y_t) / pi_behav(y_t)

without gradient. The loss keeps its denominators (every loss token counts, kept or
not), as TRL, verl and AReaL do: a masked token adds 0, it does not enlarge the others.

Signature: ``fn(inputs: CorrectionInputs, *, cfg: CorrectionParams) -> Correction``.
Suffixes: B samples, T tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from grouprl.algo.correction_choice import auto_correction
from grouprl.algo.registry import Registry

CORRECTIONS: Registry = Registry("off-policy correction")

LOG_RATIO_MAX = 20.0  # log r at most before exp (exp(20) = 4.9e8), verl's bound on IS weights
DECOUPLED_CAP = 5.0  # AReaL's behaviour-weight cap (its old behave_imp_weight_cap default)
TIS_CAP = 2.0  # TIS (Yao et al. 2025) and verl's rollout_is_threshold default


class CorrectionParams(Protocol):
    """The ``algo`` keys the corrections read (read-only: ``AlgoConfig`` satisfies it)."""

    @property
    def tis_cap(self) -> float | None: ...
    @property
    def is_band(self) -> tuple[float, float]: ...
    @property
    def m2po_threshold(self) -> float: ...


@dataclass(frozen=True)
class CorrectionInputs:
    prox_logprobs_BT: Tensor  # pi_prox's logprob of each token (trainer, before the update)
    behav_logprobs_BT: Tensor  # pi_behav's (the engine's) logprob of each token
    loss_mask_BT: Tensor  # the tokens of the loss
    m2po_cutoff: float | None = None  # ``m2po``: the bound from the whole step's batch

    def log_ratio_BT(self) -> Tensor:
        """log r_t, 0 off the loss mask (padding and prompts never reach ``exp``). Bounded
        above only: below, e^(log r) underflows to 0 harmlessly, and ``tis`` stays the
        old ``min(e^(log r), cap)`` exactly."""
        diff_BT = (self.prox_logprobs_BT - self.behav_logprobs_BT).detach().float()
        bounded_BT = diff_BT.clamp(max=LOG_RATIO_MAX)
        return torch.where(self.loss_mask_BT.bool(), bounded_BT, 0.0)


@dataclass(frozen=True)
class Correction:
    weight_BT: Tensor  # w_t, without gradient
    masked_BT: Tensor  # bool: loss tokens the correction drops (w_t = 0 by its rule)


def _kept(weight_BT: Tensor, keep_BT: Tensor, mask_BT: Tensor) -> Correction:
    mask_BT = mask_BT.bool()
    return Correction(torch.where(keep_BT, weight_BT, 0.0), mask_BT & ~keep_BT)


def _sequence_log_ratio(inputs: CorrectionInputs) -> Tensor:
    """log of the sequence ratio prod_t r_t (TRL's ``sequence_*`` modes, verl's
    ``rollout_is=sequence``), bounded, one value per row broadcast to its tokens."""
    log_B = inputs.log_ratio_BT().sum(dim=1).clamp(max=LOG_RATIO_MAX)
    return log_B[:, None].expand_as(inputs.loss_mask_BT)


@CORRECTIONS.register("none")
def no_correction(inputs: CorrectionInputs, *, cfg: CorrectionParams) -> Correction:
    """w_t = 1: the surrogate's own ratio is the only one (on-policy, or
    ``algo.old_logprobs=engine`` where the PPO ratio is taken against pi_behav)."""
    del cfg
    ones_BT = torch.ones_like(inputs.loss_mask_BT, dtype=torch.float32)
    return Correction(ones_BT, torch.zeros_like(inputs.loss_mask_BT, dtype=torch.bool))


@CORRECTIONS.register("decoupled")
def decoupled(inputs: CorrectionInputs, *, cfg: CorrectionParams) -> Correction:
    """Decoupled PPO (Fu et al. 2025, "AReaL", arXiv 2505.24298, eq. 5): the PPO clip is
    taken against the proximal policy and the behaviour gap is an importance weight

        w_t = r_t  if r_t <= C  else 0          C = algo.tis_cap or 5

    AReaL masks rather than truncates the tokens above the cap (its ``token_mask`` mode
    with ``upper = 5``, the old ``behave_imp_weight_cap``). No lower bound.
    """
    cap = cfg.tis_cap if cfg.tis_cap is not None else DECOUPLED_CAP
    r_BT = inputs.log_ratio_BT().exp()
    return _kept(r_BT, r_BT <= cap, inputs.loss_mask_BT)


@CORRECTIONS.register("tis")
def tis(inputs: CorrectionInputs, *, cfg: CorrectionParams) -> Correction:
    """Token-level truncated importance sampling (Yao et al. 2025, "Your Efficient RL
    Framework Secretly Brings You Off-Policy RL Training"; TRL's ``token_truncate``):

        w_t = min(r_t, C)                        C = algo.tis_cap or 2
    """
    cap = cfg.tis_cap if cfg.tis_cap is not None else TIS_CAP
    weight_BT = inputs.log_ratio_BT().exp().clamp(max=cap)
    return Correction(weight_BT, torch.zeros_like(inputs.loss_mask_BT, dtype=torch.bool))


@CORRECTIONS.register("seq_tis")
def seq_tis(inputs: CorrectionInputs, *, cfg: CorrectionParams) -> Correction:
    """Sequence-level truncated IS (verl's Seq-TIS, ``rollout_is=sequence``; TRL's
    ``sequence_truncate``): one weight per sequence, the product of its token ratios,

        w_i = min(exp(sum_t log r_i,t), C)       C = algo.tis_cap or 2

    on every token of sequence i. Unbiased up to the cap but high-variance on long
    sequences: the product of hundreds of ratios is usually far from 1.
    """
    cap = cfg.tis_cap if cfg.tis_cap is not None else TIS_CAP
    weight_BT = _sequence_log_ratio(inputs).exp().clamp(max=cap)
    return Correction(weight_BT, torch.zeros_like(inputs.loss_mask_BT, dtype=torch.bool))


@CORRECTIONS.register("token_mask")
def token_mask(inputs: CorrectionInputs, *, cfg: CorrectionParams) -> Correction:
    """IcePop (Ling Team 2025, "Every Step Evolves: Scaling RL for Trillion-Scale Thinking
    Model", arXiv 2510.18855; TRL's ``token_mask``): tokens whose ratio leaves the band are
    dropped, the others keep their ratio as weight,

        w_t = r_t  if low <= r_t <= high  else 0      [low, high] = algo.is_band

    IcePop's paper band is [0.5, 5]; ``algo.is_band`` defaults to [0.5, 2] (verl's Seq-MIS).
    """
    low, high = cfg.is_band
    r_BT = inputs.log_ratio_BT().exp()
    return _kept(r_BT, (r_BT >= low) & (r_BT <= high), inputs.loss_mask_BT)


@CORRECTIONS.register("seq_mask")
def seq_mask(inputs: CorrectionInputs, *, cfg: CorrectionParams) -> Correction:
    """Sequence-level masked IS (verl's Seq-MIS: ``rollout_is=sequence`` with
    ``rollout_rs=seq_sum_k1`` and band ``0.5_2.0``; TRL's ``sequence_mask``): the sequence
    ratio is the product of its token ratios, as in ``seq_tis``, and

        w_i = rho_i  if low <= rho_i <= high  else 0    rho_i = prod_t r_i,t

    on every token of sequence i. The product, not the geometric mean (AReaL's sequence
    level, verl's Geo-RS): it is the sequence's likelihood ratio, the one TRL and verl's
    Seq-MIS band, and it agrees with ``seq_tis``. Its cost is the length trap: the log of
    the product drifts by about -KL per token, so at a band of [0.5, 2] long completions
    sampled several versions back are mostly dropped (``correction/masked_frac`` shows
    it); ``token_mask`` does not have that bias towards short sequences.
    """
    low, high = cfg.is_band
    rho_BT = _sequence_log_ratio(inputs).exp()
    return _kept(rho_BT, (rho_BT >= low) & (rho_BT <= high), inputs.loss_mask_BT)


@CORRECTIONS.register("m2po")
def m2po(inputs: CorrectionInputs, *, cfg: CorrectionParams) -> Correction:
    """M2PO (Zheng et al. 2025, "Prosperity before Collapse: How Far Can Off-Policy RL Reach
    with Stale Data on LLMs?", arXiv 2510.01161): the tokens with the largest second moment
    (log r_t)^2 are dropped, largest first, until the mean over the kept ones is below
    ``algo.m2po_threshold``; kept tokens weigh 1 (the PPO ratio does the rest):

        w_t = 1 if (log r_t)^2 < c else 0        c = ``m2po_cutoff`` of the step's tokens

    ``inputs.m2po_cutoff`` is c computed once over the whole step's batch (the update
    does so), so micro- and mini-batch sizes do not change the mask; without it c comes
    from the given tokens. As in AReaL, r_t uses pi_prox (the paper's pi_theta at the
    step's first update), so the mask is fixed for the step.

    Departure from the paper: M2PO drops PPO's clip (the mask is its only trust region,
    on the ratio pi_theta / pi_behav); here ``algo.policy_loss`` keeps its clip on
    pi_theta / pi_prox, because every correction only weighs the one shared surrogate
    (``algo/objective.py``). The clip acts only within a step: at its first update the
    ratio is 1, so with one optimizer step per batch (``train.mini_batch_size`` the whole
    batch, ``algo.num_iterations=1``) it never fires. With several updates per step it
    bounds their drift from pi_prox, which the paper does not; raise
    ``algo.clip_eps_low``/``high`` to loosen it. The other difference is the ratio's
    base: the paper's pi_theta / pi_behav carries each kept token's r_t into the
    gradient, where here a kept token weighs 1.
    """
    m2_BT = inputs.log_ratio_BT() ** 2
    mask_BT = inputs.loss_mask_BT.bool()
    cutoff = inputs.m2po_cutoff
    if cutoff is None:
        cutoff = m2po_cutoff(m2_BT[mask_BT], threshold=cfg.m2po_threshold)
    ones_BT = torch.ones_like(m2_BT)
    return _kept(ones_BT, m2_BT < cutoff, mask_BT)


def m2po_cutoff(m2: Tensor, *, threshold: float) -> float:
    """M2PO's mask as one bound on the second moments ``m2`` (one per loss token): the
    tokens at or above it are dropped. Sorted largest first, the fewest leading values
    whose removal brings the mean of the rest below ``threshold`` are dropped, and the
    bound is the smallest of them (ties with it go too, which only lowers the kept mean).
    inf: nothing to drop. When no suffix is below the threshold, all but the smallest
    value go (AReaL keeps that one token; here its ties go with the rest)."""
    if m2.numel() == 0:
        return math.inf
    ordered, _ = m2.double().sort(descending=True)
    n = ordered.numel()
    counts = torch.arange(n, 0, -1, dtype=ordered.dtype)
    suffix_mean = ordered.flip(0).cumsum(0).flip(0) / counts
    below = torch.nonzero(suffix_mean < threshold)
    dropped = int(below[0]) if len(below) else n - 1
    return math.inf if dropped == 0 else float(ordered[dropped - 1])


def correction_name(cfg: CorrectionParams) -> str:
    """The correction a config asks for. ``RunConfig`` resolves ``auto`` at load time
    (with ``rollout.max_staleness``); an ``AlgoConfig`` used alone has no staleness, so
    its ``auto`` is ``tis`` with ``tis_cap`` set and ``none`` otherwise (one rule for
    both: ``algo/correction_choice.auto_correction``)."""
    name = getattr(cfg, "correction", "auto")
    if name == "auto":
        return auto_correction(tis_cap=cfg.tis_cap, stale=False)
    return name


def mismatch_alarms(metrics: dict[str, float], threshold: float) -> list[str]:
    """One message per staleness level whose engine/trainer KL (``offpolicy/lag<k>/kl``,
    ``workers/update.offpolicy_stats``) is above ``threshold`` (``algo.mismatch_alarm``)."""
    alarms = []
    levels = sorted(
        int(key.split("/")[1].removeprefix("lag"))
        for key in metrics
        if key.startswith("offpolicy/lag") and key.endswith("/kl")
    )
    for lag in levels:
        kl = metrics[f"offpolicy/lag{lag}/kl"]
        if kl <= threshold:
            continue
        behind = (
            "sampled by the trainer's own weights"
            if lag == 0
            else f"{lag} weight version{'s' if lag > 1 else ''} old"
        )
        fix = (
            "the engine's numerics differ from the trainer's (check the engine's dtype and "
            "the weight push), or choose a stronger algo.correction (token_mask, m2po)"
            if lag == 0
            else "lower rollout.max_staleness, or choose a stronger algo.correction "
            "(token_mask, seq_mask or m2po mask the most off-policy tokens)"
        )
        alarms.append(
            f"tokens {behind} (lag {lag}) have a per-token KL(engine || trainer) of {kl:.4g}, "
            f"above algo.mismatch_alarm={threshold:g}: {fix}; or raise algo.mismatch_alarm "
            "if this gap is expected."
        )
    return alarms
