"""One training step's updates: iterations x mini-batches x micro-batches.

    batch (B samples) ─► [old logprobs, once, if the batch feeds >1 update]
        for iteration in range(num_iterations):
            for mini-batch (mini_batch_size samples):      ─► one optimizer step
                for micro-batch (micro_batch_size samples, or micro_batch_tokens tokens):
                    forward (padded, or packed without padding), loss, backward
                    loss denominators = the whole mini-batch's counts

Because denominators are the mini-batch's, micro-batch size changes the arithmetic
order but not the update, nor does the number of ranks (``workers/rank.py``). The
policy and the critic share this schedule (``run_updates``); each brings its own
micro-batch loss.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from functools import partial

import torch
import torch.distributed as dist
from torch import Tensor
from torch.distributed.tensor import DTensor

from grouprl.algo.aggregate import LossNorm, token_mean
from grouprl.algo.corrections import CorrectionInputs, correction_name, m2po_cutoff
from grouprl.algo.objective import micro_batch_loss
from grouprl.config.algo_section import AlgoConfig
from grouprl.config.train import TrainConfig
from grouprl.types import TrainingBatch
from grouprl.workers.logprobs import TokenScorer
from grouprl.workers.rank import SINGLE, Rank, all_max, all_sum

# (micro-batch, the mini-batch's norm, iteration) -> (loss to backpropagate, metrics)
MicroLoss = Callable[[TrainingBatch, LossNorm, int], tuple[torch.Tensor, dict]]


def trimmed(batch: TrainingBatch) -> TrainingBatch:
    """Drop right-padding columns that no row of this micro-batch uses."""
    width = int(batch.attention_mask_BT.sum(dim=1).max())
    return batch.select((slice(None), slice(0, width)))


@dataclass(frozen=True)
class MicroBatching:
    """How a rank's samples split into forward/backward passes: ``size`` samples each,
    or (``tokens``) as many consecutive samples as fit that many tokens. Tokens are the
    real ones when ``packed`` (no padding is computed), else rows x the longest row."""

    size: int
    tokens: int | None = None
    packed: bool = False

    @classmethod
    def of(cls, train: TrainConfig) -> MicroBatching:
        return cls(train.micro_batch_size, train.micro_batch_tokens, train.packing)

    def ranges(self, attention_mask_BT: torch.Tensor, rank: Rank = SINGLE) -> list[range]:
        """Consecutive row ranges. Under a token budget every rank gets as many ranges
        as the rank needing most (FSDP2's collectives pair up pass by pass)."""
        rows = attention_mask_BT.shape[0]
        if self.tokens is None:
            return [range(s, min(s + self.size, rows)) for s in range(0, rows, self.size)]
        lengths = attention_mask_BT.sum(dim=1).tolist()
        ranges, start = [], 0
        for end in range(1, rows + 1):
            if end - start > 1 and self._cost(lengths[start:end]) > self.tokens:
                ranges.append(range(start, end - 1))
                start = end - 1
        ranges.append(range(start, rows))
        want = all_max(len(ranges)) if rank.distributed else len(ranges)
        while len(ranges) < want:  # split the longest range (each rank has >= want rows)
            i = max(range(len(ranges)), key=lambda j: len(ranges[j]))
            r = ranges[i]
            half = r.start + len(r) // 2
            ranges[i : i + 1] = [range(r.start, half), range(half, r.stop)]
        return ranges

    def _cost(self, lengths: list[int]) -> int:
        return sum(lengths) if self.packed else len(lengths) * max(lengths)


def micro_batches(batch: TrainingBatch, plan: MicroBatching, rank: Rank = SINGLE):
    """``(first row, trimmed micro-batch)`` over ``batch`` in order."""
    for rows in plan.ranges(batch.attention_mask_BT, rank):
        yield rows.start, trimmed(batch.select(slice(rows.start, rows.stop)))


def no_grad_scores(
    score: Callable[[TrainingBatch], Tensor],
    batch: TrainingBatch,
    *,
    micro: MicroBatching,
    autocast: Callable[[], AbstractContextManager] = nullcontext,
    rank: Rank = SINGLE,
) -> Tensor:
    """``score`` of each micro-batch (``TokenScorer.loss_logprobs``, a ``ValueScorer``),
    without gradient, put together in float32 at the batch's full width (a micro-batch
    is as wide as its longest row; zeros past it)."""
    out_BT = torch.zeros_like(batch.loss_mask_BT, dtype=torch.float32)
    with torch.no_grad():
        for start, part in micro_batches(batch, micro, rank):
            with autocast():
                scores_BT = score(part)
            out_BT[start : start + len(part), : scores_BT.shape[1]] = scores_BT
    return out_BT


def run_updates(
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: TrainingBatch,
    micro_loss: MicroLoss,
    num_iterations: int,
    mini_batch_size: int,
    micro: MicroBatching,
    max_grad_norm: float | None,
    rank: Rank = SINGLE,
) -> dict[str, float]:
    """Runs the optimizer steps; returns the metrics summed per optimizer step (over
    micro-batches and ranks), then averaged over them, plus ``grad_norm``. Metrics a
    micro-loss reports only in iteration 0 are averaged over the first pass's steps. A
    mini-batch without loss tokens (all masked) makes no update."""
    totals: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for iteration in range(num_iterations):
        for start in range(0, len(batch), mini_batch_size):
            mini = batch.select(slice(start, start + mini_batch_size))
            trained = int((mini.loss_mask_BT.sum(dim=1) > 0).sum())  # not dropped nor masked
            norm = LossNorm(tokens=int(mini.loss_mask_BT.sum()), sequences=trained)
            if norm.tokens == 0:
                continue
            optimizer.zero_grad(set_to_none=True)
            step_metrics: dict[str, float] = defaultdict(float)
            for _, part in micro_batches(mini.select(rank.block(len(mini))), micro, rank):
                loss, metrics = micro_loss(part, norm, iteration)
                loss.backward()
                metrics["loss"] = loss.detach()
                for name, value in metrics.items():
                    step_metrics[name] += float(value)
            limit = max_grad_norm if max_grad_norm is not None else math.inf
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), limit)
            if isinstance(grad_norm, DTensor):
                grad_norm = grad_norm.full_tensor()
            if not torch.isfinite(grad_norm):
                raise FloatingPointError(f"gradient norm is {float(grad_norm)}; update skipped")
            optimizer.step()
            step_metrics = all_sum(step_metrics)
            step_metrics["grad_norm"] = float(grad_norm)
            for name, value in step_metrics.items():
                totals[name] += value
                counts[name] += 1
    return {name: value / counts[name] for name, value in totals.items()}


def replica_gap_parts(
    gap_BT: Tensor, micro: TrainingBatch, replicas: int, *, norm: LossNorm
) -> dict[str, Tensor]:
    """Each replica's share of the mini-batch's loss tokens and of their summed
    engine/trainer gap, both over the mini-batch's tokens; summed over micro-batches and
    ranks, ``gap_part / token_share`` is the replica's mean gap (``replica_gaps``). Every
    replica has both keys in every pass, so every rank reduces the same keys."""
    out = {}
    for k in range(replicas):
        mask_BT = micro.loss_mask_BT * (micro.replica_BT == k)
        out[f"replica/{k}/gap_part"] = (gap_BT * mask_BT).sum() / max(norm.tokens, 1)
        out[f"replica/{k}/token_share"] = mask_BT.sum() / max(norm.tokens, 1)
    return out


def replica_gaps(metrics: dict[str, float]) -> dict[str, float]:
    """``metrics`` with each replica's ``gap_part``/``token_share`` pair replaced by its
    mean engine/trainer gap, ``replica/K/engine_logprob_gap``."""
    out = dict(metrics)
    for key in [k for k in metrics if k.endswith("/gap_part")]:
        prefix = key.removesuffix("/gap_part")
        share = out.pop(f"{prefix}/token_share")
        part = out.pop(key)
        if share > 0:
            out[f"{prefix}/engine_logprob_gap"] = part / share
    return out


def token_lags(batch: TrainingBatch, version: int | None) -> Tensor:
    """How many weight versions behind ``version`` (the policy being trained) each loss
    token was sampled: 0 for all without ``batch.version_BT`` or ``version``. Rows
    without loss tokens, prompts and padding get 0 too (the loss mask leaves them out)."""
    mask_BT = batch.loss_mask_BT.bool()
    if batch.version_BT is None or version is None:
        return torch.zeros_like(batch.loss_mask_BT, dtype=torch.long)
    lag_BT = torch.where(mask_BT, version - batch.version_BT, 0)
    if (lag_BT < 0).any():
        newest = int(batch.version_BT[mask_BT].max())
        raise ValueError(
            f"a token was sampled by weight version {newest}, newer than the trained "
            f"policy's version={version}: the caller passes the version the trainer holds"
        )
    return lag_BT


def offpolicy_parts(
    log_ratio_BT: Tensor, lag_BT: Tensor, mask_BT: Tensor, lags: list[int], *, norm: LossNorm
) -> dict[str, Tensor]:
    """Per staleness level k, sums over the loss tokens of lag k of: the k3 estimate of
    KL(pi_behav || pi_prox) (``log_ratio_BT`` = log pi_prox - log pi_behav =: d, so
    k3 = e^d - 1 - d: unbiased for samples drawn by pi_behav), the ratio e^d and |d|,
    and the token count, each over the mini-batch's tokens. Summed over micro-batches
    and ranks, ``part / token_share`` is the level's mean (``offpolicy_stats``). Every
    level of the step's batch has all four keys in every pass, so every rank reduces the
    same keys."""
    ratio_BT = log_ratio_BT.exp()
    values = {
        "kl_part": ratio_BT - 1 - log_ratio_BT,
        "ratio_part": ratio_BT,
        "abs_log_ratio_part": log_ratio_BT.abs(),
    }
    out = {}
    for k in lags:
        at_k_BT = (mask_BT.bool() & (lag_BT == k)).to(log_ratio_BT.dtype)
        for name, value_BT in values.items():
            out[f"offpolicy/lag{k}/{name}"] = (value_BT * at_k_BT).sum() / max(norm.tokens, 1)
        out[f"offpolicy/lag{k}/token_share"] = at_k_BT.sum() / max(norm.tokens, 1)
    return out


def offpolicy_stats(metrics: dict[str, float]) -> dict[str, float]:
    """``metrics`` with each level's parts replaced by means over its tokens:
    ``offpolicy/lag<k>/kl``, ``ratio_mean`` and ``abs_log_ratio``; ``token_share`` (the
    level's share of the loss tokens) stays."""
    out = dict(metrics)
    finals = {"kl_part": "kl", "ratio_part": "ratio_mean", "abs_log_ratio_part": "abs_log_ratio"}
    for key in [k for k in metrics if k.startswith("offpolicy/lag") and k.endswith("/kl_part")]:
        prefix = key.removesuffix("/kl_part")
        share = out[f"{prefix}/token_share"]
        for part, final in finals.items():
            value = out.pop(f"{prefix}/{part}")
            if share > 0:
                out[f"{prefix}/{final}"] = value / share
    return out


def _sum_over_ranks(values_BT: Tensor, rank: Rank) -> Tensor:
    """``values_BT`` summed over the ranks: each rank's rows, zeros elsewhere, become the
    whole batch's on every rank."""
    if rank.distributed and dist.is_initialized():
        values_BT = values_BT.clone()
        dist.all_reduce(values_BT)
    return values_BT


def _proximal_logprobs(
    scorer: TokenScorer,
    batch: TrainingBatch,
    *,
    mini_batch_size: int,
    train: TrainConfig,
    autocast: Callable[[], AbstractContextManager],
    rank: Rank,
) -> Tensor:
    """pi_prox's logprobs: the trainer's policy as it is before the step's first update
    (not the engine that sampled the tokens, pi_behav, whose logprobs the batch already
    holds), scored once, for the rows this rank trains on; zeros on the other ranks' rows."""
    rows = rank.rows(len(batch), mini_batch_size=mini_batch_size)
    old_BT = torch.zeros_like(batch.engine_logprobs_BT)
    old_BT[rows] = no_grad_scores(
        scorer.loss_logprobs,
        batch.select(rows),
        micro=MicroBatching.of(train),
        autocast=autocast,
        rank=rank,
    )
    return old_BT


def _first_pass_metrics(
    micro: TrainingBatch,
    before_BT: Tensor,
    *,
    replicas: int,
    lag_levels: list[int],
    version: int | None,
    norm: LossNorm,
    peak: list[float],
) -> dict[str, Tensor]:
    """The policy's logprobs before the update (``before_BT``) against the engine's: the
    gap (numerics; after a good sync ~0 in float32, one step of policy change with
    rollout.max_staleness=1), per replica, and per staleness level. ``peak[0]`` becomes
    the largest ratio seen (a max cannot go through the metrics' sums)."""
    gap_BT = (before_BT - micro.engine_logprobs_BT).abs()
    metrics = {"engine_logprob_gap": token_mean(gap_BT, micro.loss_mask_BT, norm=norm)}
    if micro.replica_BT is not None:
        metrics.update(replica_gap_parts(gap_BT, micro, replicas, norm=norm))
    inputs = CorrectionInputs(before_BT, micro.engine_logprobs_BT, micro.loss_mask_BT)
    log_ratio_BT = inputs.log_ratio_BT()
    lag_BT = token_lags(micro, version)
    metrics.update(offpolicy_parts(log_ratio_BT, lag_BT, micro.loss_mask_BT, lag_levels, norm=norm))
    if micro.loss_mask_BT.any():
        peak[0] = max(peak[0], float(log_ratio_BT[micro.loss_mask_BT.bool()].max().exp()))
    return metrics


def policy_update(
    *,
    scorer: TokenScorer,
    optimizer: torch.optim.Optimizer,
    batch: TrainingBatch,
    algo: AlgoConfig,
    train: TrainConfig,
    mini_batch_size: int,
    beta: float = 0.0,
    entropy_coef: float = 0.0,
    version: int | None = None,
    autocast: Callable[[], AbstractContextManager] = nullcontext,
    rank: Rank = SINGLE,
) -> dict[str, float]:
    """Runs the policy's update and returns metrics averaged over its optimizer steps.
    ``version`` is the weight version being trained: a token's staleness is ``version``
    minus the version that sampled it (``batch.version_BT``), and the off-policy
    statistics are logged per staleness level (``offpolicy/lag<k>/...``). ``beta`` and
    ``entropy_coef`` are the step's KL and entropy-bonus coefficients."""
    correction = correction_name(algo)
    whole_old_BT = _set_old_logprobs(
        scorer,
        batch,
        algo=algo,
        whole_step=correction == "m2po",
        mini_batch_size=mini_batch_size,
        train=train,
        autocast=autocast,
        rank=rank,
    )
    cutoff = None
    if correction == "m2po":
        assert whole_old_BT is not None  # given, or the pass above ran
        cutoff = _m2po_step_cutoff(batch, whole_old_BT, threshold=algo.m2po_threshold)
    peak = [-math.inf]
    first_pass = partial(
        _first_pass_metrics,
        replicas=0 if batch.replica_BT is None else int(batch.replica_BT.max()) + 1,
        lag_levels=sorted(set(token_lags(batch, version)[batch.loss_mask_BT.bool()].tolist())),
        version=version,
        peak=peak,
    )
    metrics = run_updates(
        model=scorer,
        optimizer=optimizer,
        batch=batch,
        micro_loss=_policy_micro_loss(
            scorer,
            algo=algo,
            coefs=(beta, entropy_coef),
            cutoff=cutoff,
            autocast=autocast,
            first_pass=first_pass,
        ),
        num_iterations=algo.num_iterations,
        mini_batch_size=mini_batch_size,
        micro=MicroBatching.of(train),
        max_grad_norm=train.max_grad_norm,
        rank=rank,
    )
    ratio_max = all_max(peak[0], rank.device) if rank.distributed else peak[0]
    if ratio_max > -math.inf:  # the largest r_t of the step's loss tokens, every rank's
        metrics["offpolicy/ratio_max"] = ratio_max
    return offpolicy_stats(replica_gaps(metrics))


def _set_old_logprobs(
    scorer: TokenScorer,
    batch: TrainingBatch,
    *,
    algo: AlgoConfig,
    whole_step: bool,
    mini_batch_size: int,
    train: TrainConfig,
    autocast: Callable[[], AbstractContextManager],
    rank: Rank,
) -> Tensor | None:
    """Sets ``batch.old_logprobs_BT`` (pi_prox) where the update needs it: the engine's
    (``algo.old_logprobs=engine``), the driver's, or one extra pass before any update when
    the batch feeds several, or for ``whole_step`` (m2po: its mask is the whole step's, and
    mini- and micro-batch sizes must not change it). Returns the whole batch's (with
    ``whole_step`` every rank's rows); None when the update needs none (it uses its own)."""
    single_update = algo.num_iterations == 1 and mini_batch_size == len(batch)
    if algo.old_logprobs == "engine":
        batch.old_logprobs_BT = batch.engine_logprobs_BT
    whole_old_BT = batch.old_logprobs_BT  # the driver's are the whole batch's
    if (not single_update or whole_step) and batch.old_logprobs_BT is None:
        batch.old_logprobs_BT = _proximal_logprobs(
            scorer,
            batch,
            mini_batch_size=mini_batch_size,
            train=train,
            autocast=autocast,
            rank=rank,
        )
        if whole_step:  # the ranks' rows partition the batch
            whole_old_BT = _sum_over_ranks(batch.old_logprobs_BT, rank)
    return whole_old_BT


def _m2po_step_cutoff(batch: TrainingBatch, whole_old_BT: Tensor, *, threshold: float) -> float:
    """M2PO's cutoff on the squared log ratio pi_prox / pi_behav over the step's loss
    tokens (``algo.m2po_threshold``), once for every mini- and micro-batch."""
    whole = CorrectionInputs(whole_old_BT, batch.engine_logprobs_BT, batch.loss_mask_BT)
    m2_BT = whole.log_ratio_BT() ** 2
    return m2po_cutoff(m2_BT[batch.loss_mask_BT.bool()], threshold=threshold)


def _policy_micro_loss(
    scorer: TokenScorer,
    *,
    algo: AlgoConfig,
    coefs: tuple[float, float],
    cutoff: float | None,
    autocast: Callable[[], AbstractContextManager],
    first_pass: Callable[..., dict[str, Tensor]],
) -> MicroLoss:
    """The policy's loss on a micro-batch (``algo/objective.micro_batch_loss``, with the
    KL and entropy-bonus coefficients ``coefs``) with its entropy (the mean, and the share
    of tokens above ``algo.entropy_threshold``), and in the first iteration
    ``first_pass``'s metrics of the logprobs before the update."""
    beta, entropy_coef = coefs

    def micro_loss(micro: TrainingBatch, norm: LossNorm, iteration: int):
        with autocast():
            logprobs_BT, entropy_BT, forward_kl_BT = scorer(
                micro.input_ids_BT, micro.attention_mask_BT, micro.loss_mask_BT, micro.teacher_top
            )
        logprobs_BT = logprobs_BT.float()
        # one update per batch: the sampling policy is the current one
        old_BT = logprobs_BT.detach() if micro.old_logprobs_BT is None else micro.old_logprobs_BT
        loss, metrics = micro_batch_loss(
            logprobs_BT=logprobs_BT,
            old_logprobs_BT=old_BT,
            ref_logprobs_BT=micro.ref_logprobs_BT,
            engine_logprobs_BT=micro.engine_logprobs_BT,
            advantages_BT=micro.advantages_BT,
            loss_mask_BT=micro.loss_mask_BT,
            norm=LossNorm(norm.tokens, norm.sequences, algo.norm_tokens),
            cfg=algo,
            beta=beta,
            m2po_cutoff=cutoff,
            entropy_BT=entropy_BT.float(),
            entropy_coef=entropy_coef,
            forward_kl_BT=forward_kl_BT,
            teacher_coef=algo.teacher_coef,
        )
        entropy_BT = entropy_BT.detach()
        metrics["entropy"] = token_mean(entropy_BT, micro.loss_mask_BT, norm=norm)
        high_BT = (entropy_BT > algo.entropy_threshold).to(entropy_BT.dtype)
        metrics["entropy_high_frac"] = token_mean(high_BT, micro.loss_mask_BT, norm=norm)
        if iteration == 0:
            before_BT = logprobs_BT.detach() if algo.old_logprobs == "engine" else old_BT
            metrics.update(first_pass(micro, before_BT, norm=norm))
        return loss, metrics

    return micro_loss
