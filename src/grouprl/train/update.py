"""One training step's policy update: iterations x mini-batches x micro-batches.

    batch (B samples) ─► [old logprobs, once, if the batch feeds >1 update]
        for iteration in range(num_iterations):
            for mini-batch (mini_batch_size samples):      ─► one optimizer step
                for micro-batch (micro_batch_size samples): forward, loss, backward
                    loss denominators = the whole mini-batch's counts

Because denominators are the mini-batch's, micro-batch size changes the
arithmetic order but not the update.
"""

from __future__ import annotations

import math
from collections import defaultdict
from contextlib import nullcontext

import torch

from grouprl.algo.aggregate import LossNorm, token_mean
from grouprl.algo.objective import micro_batch_loss
from grouprl.config.schema import AlgoConfig, TrainConfig
from grouprl.train.logprobs import token_logprobs
from grouprl.types import TrainingBatch


def _trimmed(batch: TrainingBatch) -> TrainingBatch:
    """Drop right-padding columns that no row of this micro-batch uses."""
    width = int(batch.attention_mask_BT.sum(dim=1).max())
    return batch.select((slice(None), slice(0, width)))


def _micro_batches(batch: TrainingBatch, size: int):
    for start in range(0, len(batch), size):
        yield _trimmed(batch.select(slice(start, start + size)))


def batch_logprobs(
    model: torch.nn.Module,
    batch: TrainingBatch,
    *,
    micro_batch_size: int,
    chunk_tokens: int,
    autocast=nullcontext,
) -> torch.Tensor:
    """Logprobs of the batch's tokens under ``model``, no gradient, full width."""
    out = torch.zeros_like(batch.engine_logprobs_BT)
    with torch.no_grad():
        for start in range(0, len(batch), micro_batch_size):
            micro = _trimmed(batch.select(slice(start, start + micro_batch_size)))
            with autocast():
                lp, _ = token_logprobs(
                    model,
                    input_ids_BT=micro.input_ids_BT,
                    attention_mask_BT=micro.attention_mask_BT,
                    chunk_tokens=chunk_tokens,
                    score_mask_BT=micro.loss_mask_BT,
                )
            out[start : start + len(micro), : lp.shape[1]] = lp.float()
    return out


def policy_update(
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: TrainingBatch,
    algo: AlgoConfig,
    train: TrainConfig,
    mini_batch_size: int,
    autocast=nullcontext,
) -> dict[str, float]:
    """Runs the update and returns metrics averaged over its optimizer steps."""
    single_update = algo.num_iterations == 1 and mini_batch_size == len(batch)
    if not single_update and batch.old_logprobs_BT is None:
        batch.old_logprobs_BT = batch_logprobs(
            model,
            batch,
            micro_batch_size=train.micro_batch_size,
            chunk_tokens=train.logprob_chunk_tokens,
            autocast=autocast,
        )
    totals: dict[str, float] = defaultdict(float)
    n_updates = 0
    for iteration in range(algo.num_iterations):
        for start in range(0, len(batch), mini_batch_size):
            mini = batch.select(slice(start, start + mini_batch_size))
            norm = LossNorm(
                tokens=int(mini.loss_mask_BT.sum()),
                sequences=len(mini),
                constant_tokens=algo.norm_tokens,
            )
            optimizer.zero_grad(set_to_none=True)
            for micro in _micro_batches(mini, train.micro_batch_size):
                with autocast():
                    logprobs_BT, entropy_BT = token_logprobs(
                        model,
                        input_ids_BT=micro.input_ids_BT,
                        attention_mask_BT=micro.attention_mask_BT,
                        chunk_tokens=train.logprob_chunk_tokens,
                        score_mask_BT=micro.loss_mask_BT,
                    )
                logprobs_BT = logprobs_BT.float()
                old_BT = micro.old_logprobs_BT
                if old_BT is None:
                    old_BT = logprobs_BT.detach()
                loss, metrics = micro_batch_loss(
                    logprobs_BT=logprobs_BT,
                    old_logprobs_BT=old_BT,
                    ref_logprobs_BT=micro.ref_logprobs_BT,
                    advantages_BT=micro.advantages_BT,
                    loss_mask_BT=micro.loss_mask_BT,
                    norm=norm,
                    cfg=algo,
                )
                loss.backward()
                metrics["loss"] = loss.detach()
                metrics["entropy"] = token_mean(entropy_BT, micro.loss_mask_BT, norm=norm)
                if iteration == 0:
                    # the sampling policy's logprobs: trainer vs engine numerics (and a
                    # stale-weights alarm: after a good sync this is ~0 in float32)
                    sampler_BT = (
                        micro.old_logprobs_BT
                        if micro.old_logprobs_BT is not None
                        else logprobs_BT.detach()
                    )
                    gap_BT = (sampler_BT - micro.engine_logprobs_BT).abs()
                    metrics["engine_logprob_gap"] = token_mean(
                        gap_BT, micro.loss_mask_BT, norm=norm
                    )
                for name, value in metrics.items():
                    totals[name] += float(value)
            max_norm = train.max_grad_norm if train.max_grad_norm is not None else math.inf
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            if not torch.isfinite(grad_norm):
                raise FloatingPointError(f"gradient norm is {float(grad_norm)}; update skipped")
            optimizer.step()
            totals["grad_norm"] += float(grad_norm)
            n_updates += 1
    n_first = math.ceil(len(batch) / mini_batch_size)
    out = {name: value / n_updates for name, value in totals.items()}
    if "engine_logprob_gap" in totals:
        out["engine_logprob_gap"] = totals["engine_logprob_gap"] / n_first
    return out
