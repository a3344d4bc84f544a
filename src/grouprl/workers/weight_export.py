"""The policy's weights as rollout engines take them (gathered whole from the ranks'
shards in buckets, in the engines' dtype, LoRA merged or not: ``LoraPush``), and a
push's stage from the node leader ranks to their replicas (``engines/push.stage``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Literal

import torch
from torch import Tensor

from grouprl.config.schema import RunConfig
from grouprl.engines.base import RolloutEngine
from grouprl.engines.push import Staged, stage
from grouprl.lora_weights import merged_weights
from grouprl.workers.common import compute_dtype
from grouprl.workers.lora import has_lora, lora_scaling
from grouprl.workers.rank import Rank

MiB = 1 << 20
LoraPush = Literal["merged", "base", "adapters"]
"""What a LoRA policy's weight buckets hold (``weight_buckets``)."""


def weight_buckets(
    model: torch.nn.Module,
    rank: Rank,
    *,
    on: frozenset[int],
    dtype: torch.dtype | None,
    bucket_bytes: int | None,
    lora: LoraPush = "merged",
) -> Iterator[dict[str, Tensor]]:
    """The weights for rollout engines in buckets of at most ``bucket_bytes`` (None: one
    bucket); a parameter larger than that goes alone, and a LoRA module's base weight
    and adapters go together. Every rank must run through it (the shards are gathered
    one parameter at a time); the ranks in ``on`` get the buckets (on the CPU, or the
    live tensors of one CPU process), the others empty ones.

    ``dtype``: the engine's. A shard is cast before its all-gather and a GPU tensor
    before its copy to the host, so a bfloat16 engine costs half the bytes to move;
    LoRA's base weights and adapters are merged in float32 and cast after. One CPU
    process hands over its live tensors uncast: the engine casts them in its one
    copy. ``lora`` (with adapters): ``merged`` under the base model's names; ``base``
    the base weights under those names (cast) and the adapters (float32), for an
    engine that merges them itself (``engines/lora_push.py``); ``adapters`` only the
    trainable weights (the adapters)."""
    keep = rank.rank in on
    lora_on = has_lora(model)
    bucket: dict[str, Tensor] = {}
    size = 0
    for group in _weight_groups(model, lora=lora if lora_on else "merged"):
        tensors = {n: _gathered(n, p, dtype=dtype, keep=keep, rank=rank) for n, p in group}
        if not keep:  # this rank took part in the gathers; the leader keeps them
            continue
        if lora_on:
            tensors = _for_engine(tensors, model, rank, dtype=dtype, lora=lora)
        nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
        if bucket and bucket_bytes is not None and size + nbytes > bucket_bytes:
            yield bucket
            bucket, size = {}, 0
        bucket.update(tensors)
        size += nbytes
    if bucket or not keep:
        yield bucket


def stage_weights(
    model: torch.nn.Module,
    rank: Rank,
    cfg: RunConfig,
    targets: dict[int, list[tuple[int, RolloutEngine]]],
    *,
    version: int,
    lora_bases: frozenset[int] = frozenset(),
) -> Staged | None:
    """Gathers the weights on each node's leader rank (the keys of ``targets``) in
    buckets of ``rollout.push_bucket_mb`` and stages them on its node's rollout
    replicas, in the engines' dtype (that of ``model.dtype`` on this rank's kind of
    device); the replicas keep generating meanwhile. With LoRA and
    ``rollout.lora_push=adapters``: the adapters only, plus the base weights when a
    replica of the node is not in ``lora_bases`` (it keeps none yet). Returns what
    it staged (None on the other ranks)."""
    dtype = compute_dtype(cfg, rank)
    mine = targets.get(rank.rank, [])
    # the server engine loads a checkpoint-format file: it is pushed merged weights
    adapters = (
        has_lora(model) and cfg.rollout.lora_push == "adapters" and cfg.rollout.engine != "server"
    )
    # every rank of the group takes the same path: the gathers are collectives
    needs_base = adapters and any(k not in lora_bases for node in targets.values() for k, _ in node)
    lora: LoraPush = "merged" if not adapters else "base" if needs_base else "adapters"
    buckets = weight_buckets(
        model,
        rank,
        on=frozenset(targets),
        dtype=dtype,
        bucket_bytes=cfg.rollout.push_bucket_mb * MiB,
        lora=lora,
    )
    if not mine:
        deque(buckets, maxlen=0)  # this rank's part of the gathers
        return None
    weight_bytes = sum(p.numel() for p in model.parameters()) * dtype.itemsize
    moved = stage(
        mine,
        buckets,
        version=version,
        dtype=dtype,
        lora_scaling=lora_scaling(model) if adapters else None,
        weight_bytes=weight_bytes,
    )
    bases = frozenset(k for k, _ in mine) if lora == "base" else frozenset()
    return Staged(moved, weight_bytes, bases)


def _weight_groups(
    model: torch.nn.Module, *, lora: LoraPush
) -> Iterator[list[tuple[str, torch.nn.Parameter]]]:
    """The parameters in ``named_parameters`` order, a LoRA module's base weights and
    adapters in one group; ``adapters``: the trainable ones only."""
    group: list[tuple[str, torch.nn.Parameter]] = []
    key = None
    for name, param in model.named_parameters():
        if lora == "adapters" and not param.requires_grad:
            continue
        module = name.split(".base_layer.")[0].split(".lora_")[0]
        if group and module != key:
            yield group
            group = []
        group.append((name, param))
        key = module
    if group:
        yield group


def _gathered(
    name: str, param: torch.nn.Parameter, *, dtype: torch.dtype | None, keep: bool, rank: Rank
) -> Tensor:
    """One parameter whole (a collective when sharded), cast to ``dtype`` on its device
    unless it belongs to a LoRA module (merged in float32 first), on the CPU where
    ``keep`` (a distributed run's leader rank)."""
    from torch.distributed.tensor import DTensor

    t = param.detach()
    cast = dtype is not None and ".lora_" not in name and ".base_layer." not in name
    if isinstance(t, DTensor):
        if t.device.type != t.device_mesh.device_type:  # cluster.offload: CPU shards
            t = t.to(t.device_mesh.device_type)
            assert isinstance(t, DTensor)  # .to keeps a DTensor a DTensor
        if cast:  # the shard: the all-gather moves the engine's bytes
            t = t.to(dtype)
            assert isinstance(t, DTensor)
        t = t.full_tensor()  # a collective: every rank takes part
    if cast and t.device.type != "cpu":  # before the copy to the host
        t = t.to(dtype)
    # one process: the live tensors, as the engine here copies them
    return t.cpu() if rank.distributed and keep else t


def _for_engine(
    tensors: dict[str, Tensor],
    model: torch.nn.Module,
    rank: Rank,
    *,
    dtype: torch.dtype | None,
    lora: LoraPush,
) -> dict[str, Tensor]:
    """One LoRA group as the engine takes it (``weight_buckets``'s ``lora``)."""
    recast = dtype is not None and (rank.distributed or rank.device != "cpu")
    if lora == "merged":
        out = merged_weights(tensors, scaling=lora_scaling(model))
    else:  # the adapters stay float32 (merged on the engine's side); the base is renamed
        out = {
            name if ".lora_" in name else name.replace(".base_layer.", "."): t
            for name, t in tensors.items()
        }
    if not recast:
        return out
    return {n: t if ".lora_" in n else t.to(dtype) for n, t in out.items()}
