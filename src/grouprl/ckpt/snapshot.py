"""Staging: the one part of a save the training loop waits for.

``stage`` copies every tensor of the training state into host-memory buffers (reused
from the previous save when the shapes match, pinned when a GPU is present), so the
loop can go on changing its own tensors while a background thread writes the copy.
``write_checkpoint`` turns a snapshot into a checkpoint directory:

    step_000040/
        shards/           DCP: model, optimizer (and critic, critic_optimizer) by name
        trainer.json      step, sampler, scheduler, RNG, algorithm state
        hf/               the model's config and tokenizer files (for export)
        config.yaml       the resolved run config (secrets redacted)
        manifest.json     last
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from torch.distributed.tensor import DTensor

from grouprl.ckpt.manifest import Manifest, write_manifest
from grouprl.ckpt.shards import save_shards
from grouprl.ckpt.state import TRAINER_FILE, TrainerState

SHARDS = "shards"


class Shards(Protocol):
    """Staged tensors that can write themselves as DCP shards: ``StagedShards`` in this
    process, or the ranks' own staged copies in a worker group (``ckpt/rank_shards.py``)."""

    def write(self, out: Path) -> None: ...


class StagedShards:
    """Host copies of a state (nested state dicts), reused from save to save."""

    def __init__(self, *, process_group=None) -> None:
        self.tensors: dict[str, Any] = {}  # empty: no buffers to reuse yet
        self.process_group = process_group

    def stage(self, state: dict[str, Any]) -> int:
        """Copies ``state`` into the buffers; returns its bytes."""
        self.tensors, nbytes = stage(state, self.tensors)
        return nbytes

    def write(self, out: Path) -> None:
        save_shards(self.tensors, out, process_group=self.process_group)


@dataclass
class Snapshot:
    step: int
    weight_version: int
    shards: Shards
    trainer: TrainerState
    files: dict[str, bytes] = field(default_factory=dict)  # relative path -> content
    nbytes: int = 0


def stage(state: object, buffers: object = None) -> tuple[Any, int]:
    """A host copy of ``state`` (nested dicts/lists of tensors and plain values), written
    into ``buffers`` (a previous copy) where shapes and dtypes match; and its bytes."""
    if isinstance(state, torch.Tensor):
        local = state.to_local() if isinstance(state, DTensor) else state
        out = (
            buffers
            if isinstance(buffers, torch.Tensor)
            and buffers.shape == local.shape
            and buffers.dtype == local.dtype
            else _host_buffer(local)
        )
        out.copy_(local.detach(), non_blocking=False)
        if isinstance(state, DTensor):  # a shard: keep its placement for DCP
            out = DTensor.from_local(
                out, state.device_mesh, state.placements, shape=state.shape, stride=state.stride()
            )
        return out, local.numel() * local.element_size()
    if isinstance(state, dict):
        total, out = 0, {}
        for key, value in state.items():
            prev = buffers.get(key) if isinstance(buffers, dict) else None
            out[key], n = stage(value, prev)
            total += n
        return out, total
    if isinstance(state, list | tuple):
        prev = buffers if isinstance(buffers, list | tuple) else [None] * len(state)
        prev = list(prev) + [None] * (len(state) - len(prev))
        parts = [stage(v, p) for v, p in zip(state, prev, strict=False)]
        return type(state)(p for p, _ in parts), sum(n for _, n in parts)
    return copy.deepcopy(state), 0


def _host_buffer(tensor: torch.Tensor) -> torch.Tensor:
    pin = tensor.is_cuda
    return torch.empty(tensor.shape, dtype=tensor.dtype, device="cpu", pin_memory=pin)


def write_checkpoint(snap: Snapshot, out: Path, *, world_size: int, config_hash: str) -> Manifest:
    """Everything of ``snap`` into the empty directory ``out``, the manifest last."""
    snap.shards.write(out / SHARDS)
    snap.trainer.write(out / TRAINER_FILE)
    for relative, content in snap.files.items():
        path = out / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return write_manifest(
        out,
        step=snap.step,
        weight_version=snap.weight_version,
        world_size=world_size,
        config_hash=config_hash,
    )
