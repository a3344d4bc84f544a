"""What every role does the same way: place its model, shard it, score a batch's rows."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch import Tensor
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

from grouprl.config.schema import RunConfig
from grouprl.device import autocast_for, resolve_dtype
from grouprl.types import TrainingBatch
from grouprl.workers.fsdp import shard
from grouprl.workers.optim import states_on_host
from grouprl.workers.rank import Rank
from grouprl.workers.update import MicroBatching, no_grad_scores

if TYPE_CHECKING:
    from transformers import PreTrainedModel


def loads_weights(rank: Rank) -> bool:
    """Only rank 0 reads the checkpoint files; the other ranks build the model's structure
    on the meta device and receive the weights from rank 0 (``prepare``), so a node holds
    one full copy in host memory, not one per rank."""
    return rank.rank == 0


def prepare(scorer: torch.nn.Module, model: PreTrainedModel, *, rank: Rank, cfg: RunConfig) -> None:
    """Turns on activation checkpointing if asked (it acts in training mode only) and
    places ``model`` on the rank's device; on a multi-rank group, shards it (FSDP2's mixed
    precision in the compute dtype) and fills every rank's shards from rank 0's weights."""
    if cfg.train.activation_checkpointing:
        checkpoint_activations(model)
    if not rank.distributed:
        # transformers wraps PreTrainedModel.to with functools.wraps, which pyright cannot bind
        model.to(rank.device)  # pyright: ignore[reportArgumentType]
        return
    full = model.state_dict() if loads_weights(rank) else {}
    shard(scorer, model, offload=cfg.cluster.offload, compute_dtype=compute_dtype(cfg, rank))
    if not loads_weights(rank):
        model.to_empty(device="cpu" if cfg.cluster.offload else rank.device)
    set_model_state_dict(
        model, full, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    )
    for buffer in model.buffers():  # not in the state dict (rotary frequencies)
        dist.broadcast(buffer, src=0)


def place_optimizer_states(optimizer: torch.optim.Optimizer, *, rank: Rank, cfg: RunConfig):
    """cluster.offload_optimizer: the states in host memory between optimizer steps (on a
    GPU rank; a CPU rank's states are there already)."""
    if cfg.cluster.offload_optimizer and rank.device != "cpu":
        states_on_host(optimizer)


def compute_dtype(cfg: RunConfig, rank: Rank) -> torch.dtype:
    """The dtype a role's passes compute in: ``model.dtype`` on the rank's device (``auto``:
    bfloat16 on CUDA, float32 on CPU). The policy and critic keep float32 weights whatever
    it is; the reference is loaded in it."""
    return resolve_dtype(cfg.model.dtype, torch.device(rank.device))


def autocast(cfg: RunConfig, rank: Rank) -> Callable[[], AbstractContextManager]:
    """The context every pass of a role runs in. On a multi-rank group none: FSDP2 gathers
    each unit already in the compute dtype (``workers/fsdp.py``), and autocast over its
    gathered weights would cache a cast of every layer. One rank (no process group, no
    FSDP2): ``torch.autocast`` over the float32 weights when the compute dtype is 16-bit."""
    if rank.distributed:
        return nullcontext
    return autocast_for(torch.device(rank.device), compute_dtype(cfg, rank))


def my_scores(
    score: Callable[[TrainingBatch], Tensor],
    batch: TrainingBatch,
    *,
    rank: Rank,
    cfg: RunConfig,
    autocast: Callable[[], AbstractContextManager],
) -> Tensor:
    """``score`` (``no_grad_scores``) of this rank's contiguous block of ``batch``, on the
    CPU (the driver concatenates the blocks in rank order)."""
    micro = MicroBatching.of(cfg.train)
    rows = batch.select(rank.block(len(batch))).to(torch.device(rank.device))
    return no_grad_scores(score, rows, micro=micro, autocast=autocast, rank=rank).cpu()


def checkpoint_activations(model: PreTrainedModel) -> None:
    """Each decoder layer keeps only its input and recomputes the rest in the backward
    pass (transformers' gradient checkpointing, non-reentrant: works under FSDP2)."""
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
