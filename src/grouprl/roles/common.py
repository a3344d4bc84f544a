"""What every role does the same way: place its model, shard it, score a batch's rows."""

from __future__ import annotations

import torch

from grouprl.config.schema import RunConfig
from grouprl.device import autocast_for, resolve_dtype
from grouprl.dist.fsdp import shard
from grouprl.dist.rank import Rank
from grouprl.types import TrainingBatch


def prepare(scorer: torch.nn.Module, model: torch.nn.Module, *, rank: Rank, cfg: RunConfig) -> None:
    """Moves ``model`` to the rank's device, turns on activation checkpointing if asked
    (it acts in training mode only) and, on a multi-rank group, shards it."""
    model.to(rank.device)
    if cfg.train.activation_checkpointing:
        checkpoint_activations(model)
    if rank.distributed:
        shard(scorer, model, offload=cfg.cluster.offload)


def autocast(cfg: RunConfig, rank: Rank):
    device = torch.device(rank.device)
    return autocast_for(device, resolve_dtype(cfg.model.dtype, device))


def my_rows(batch: TrainingBatch, rank: Rank) -> TrainingBatch:
    """This rank's contiguous block of the batch, on its device (for no-grad passes whose
    results the driver concatenates in rank order)."""
    return batch.select(rank.block(len(batch))).to(torch.device(rank.device))


def checkpoint_activations(model: torch.nn.Module) -> None:
    """Each decoder layer keeps only its input and recomputes the rest in the backward
    pass (transformers' gradient checkpointing, non-reentrant: works under FSDP2)."""
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
