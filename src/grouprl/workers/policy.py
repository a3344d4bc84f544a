"""The policy role: its model (a shard of it on a multi-rank group), AdamW, the LR
schedule, and the update of one training step."""

from __future__ import annotations

import tempfile
from collections import deque
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Literal

import torch
from torch import Tensor

from grouprl.ckpt.resume import load_part, part_state
from grouprl.config.schema import RunConfig
from grouprl.device import resolve_dtype
from grouprl.engines.base import RolloutEngine
from grouprl.engines.replicas import Staged, stage
from grouprl.lora_weights import merged_weights
from grouprl.metrics.telemetry import Hardware, ModelShape, memory_now, peak_flops
from grouprl.types import TrainingBatch
from grouprl.workers.common import (
    autocast,
    loads_weights,
    my_scores,
    place_optimizer_states,
    prepare,
)
from grouprl.workers.logprobs import TokenScorer
from grouprl.workers.lora import adapters_off, add_lora, has_lora, lora_scaling
from grouprl.workers.model import load_causal_lm
from grouprl.workers.optim import make_optimizer, make_scheduler
from grouprl.workers.rank import Rank
from grouprl.workers.update import policy_update

MiB = 1 << 20
LoraPush = Literal["merged", "base", "adapters"]
"""What a LoRA policy's weight buckets hold (``PolicyWorker.weight_buckets``)."""


class PolicyWorker:
    """One rank of the policy. ``learning_steps`` sizes the LR schedule."""

    def __init__(self, rank: Rank, *, cfg: RunConfig, learning_steps: int) -> None:
        self.rank, self.cfg = rank, cfg
        self.model = load_causal_lm(
            cfg.model, dtype=torch.float32, device=torch.device("cpu"), weights=loads_weights(rank)
        )
        if cfg.train.lora.rank:
            add_lora(self.model, cfg.train.lora)
        # scored at the sampling temperature: the policy, old and (LoRA) reference
        # logprobs are all of softmax(logits / rollout.temperature) (workers/logprobs.py)
        self.scorer = TokenScorer.of(self.model, cfg)
        prepare(self.scorer, self.model, rank=rank, cfg=cfg)
        self.optimizer = make_optimizer(self.model, cfg.train)
        place_optimizer_states(self.optimizer, rank=rank, cfg=cfg)
        self.scheduler = make_scheduler(self.optimizer, cfg.train, total_steps=learning_steps)
        self.autocast = autocast(cfg, rank)

    def logprobs(self, batch: TrainingBatch, *, adapters: bool = True) -> Tensor:
        """Logprobs of this rank's block of ``batch`` under the current weights (CPU);
        ``adapters=False``: under the base model (the KL reference of a LoRA policy)."""
        with nullcontext() if adapters else adapters_off(self.model):
            return my_scores(
                self.scorer.loss_logprobs,
                batch,
                rank=self.rank,
                cfg=self.cfg,
                autocast=self.autocast,
            )

    def update(
        self, batch: TrainingBatch, *, beta: float, mini_batch_size: int, version: int
    ) -> dict[str, float]:
        """The policy's optimizer steps for one training step, then one LR-schedule step.
        ``version`` is the weight version being trained (staleness per token is measured
        from it). Metrics are summed over the ranks (the same on every rank)."""
        batch = batch.to(torch.device(self.rank.device))
        self.scorer.train()
        metrics = policy_update(
            scorer=self.scorer,
            optimizer=self.optimizer,
            batch=batch,
            algo=self.cfg.algo,
            train=self.cfg.train,
            mini_batch_size=mini_batch_size,
            beta=beta,
            version=version,
            autocast=self.autocast,
            rank=self.rank,
        )
        metrics["lr"] = self.optimizer.param_groups[0]["lr"]
        self.scheduler.step()
        return metrics

    def hardware(self) -> Hardware:
        """The model's shape and this device's peak FLOP/s (a CPU measures its own)."""
        device = torch.device(self.rank.device)
        peak, source = peak_flops(device, resolve_dtype(self.cfg.model.dtype, device))
        return Hardware(ModelShape.of(self.model), peak, source)

    def memory(self) -> dict[str, float]:
        """This rank's memory now and at its peak since the last call (GiB)."""
        return memory_now(torch.device(self.rank.device))

    def weights(
        self, *, on: frozenset[int] = frozenset({0}), dtype: torch.dtype | None = None
    ) -> dict[str, Tensor] | None:
        """Full weights by parameter name, for rollout engines (LoRA merged in, under the
        base model's names): ``weight_buckets`` in one dict. Every rank must call this;
        the ranks in ``on`` get them on the CPU, the others None."""
        full: dict[str, Tensor] = {}
        for bucket in self.weight_buckets(on=on, dtype=dtype, bucket_bytes=None):
            full.update(bucket)
        return full if self.rank.rank in on else None

    def weight_buckets(
        self,
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
        keep = self.rank.rank in on
        lora_on = has_lora(self.model)
        bucket: dict[str, Tensor] = {}
        size = 0
        for group in self._weight_groups(lora=lora if lora_on else "merged"):
            tensors = {n: self._gathered(n, p, dtype=dtype, keep=keep) for n, p in group}
            if not keep:  # this rank took part in the gathers; the leader keeps them
                continue
            if lora_on:
                tensors = self._for_engine(tensors, dtype=dtype, lora=lora)
            nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
            if bucket and bucket_bytes is not None and size + nbytes > bucket_bytes:
                yield bucket
                bucket, size = {}, 0
            bucket.update(tensors)
            size += nbytes
        if bucket or not keep:
            yield bucket

    def _weight_groups(self, *, lora: LoraPush) -> Iterator[list[tuple[str, torch.nn.Parameter]]]:
        """The parameters in ``named_parameters`` order, a LoRA module's base weights and
        adapters in one group; ``adapters``: the trainable ones only."""
        group: list[tuple[str, torch.nn.Parameter]] = []
        key = None
        for name, param in self.model.named_parameters():
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
        self, name: str, param: torch.nn.Parameter, *, dtype: torch.dtype | None, keep: bool
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
        return t.cpu() if self.rank.distributed and keep else t

    def _for_engine(
        self, tensors: dict[str, Tensor], *, dtype: torch.dtype | None, lora: LoraPush
    ) -> dict[str, Tensor]:
        """One LoRA group as the engine takes it (``weight_buckets``'s ``lora``)."""
        recast = dtype is not None and (self.rank.distributed or self.rank.device != "cpu")
        if lora == "merged":
            out = merged_weights(tensors, scaling=lora_scaling(self.model))
        else:  # the adapters stay float32 (merged on the engine's side); the base is renamed
            out = {
                name if ".lora_" in name else name.replace(".base_layer.", "."): t
                for name, t in tensors.items()
            }
        if not recast:
            return out
        return {n: t if ".lora_" in n else t.to(dtype) for n, t in out.items()}

    def stage_weights(
        self,
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
        dtype = resolve_dtype(self.cfg.model.dtype, torch.device(self.rank.device))
        mine = targets.get(self.rank.rank, [])
        # the server engine loads a checkpoint-format file: it is pushed merged weights
        adapters = (
            has_lora(self.model)
            and self.cfg.rollout.lora_push == "adapters"
            and self.cfg.rollout.engine != "server"
        )
        # every rank of the group takes the same path: the gathers are collectives
        needs_base = adapters and any(
            k not in lora_bases for node in targets.values() for k, _ in node
        )
        lora: LoraPush = "merged" if not adapters else "base" if needs_base else "adapters"
        buckets = self.weight_buckets(
            on=frozenset(targets),
            dtype=dtype,
            bucket_bytes=self.cfg.rollout.push_bucket_mb * MiB,
            lora=lora,
        )
        if not mine:
            deque(buckets, maxlen=0)  # this rank's part of the gathers
            return None
        weight_bytes = sum(p.numel() for p in self.model.parameters()) * dtype.itemsize
        moved = stage(
            mine,
            buckets,
            version=version,
            dtype=dtype,
            lora_scaling=lora_scaling(self.model) if adapters else None,
            weight_bytes=weight_bytes,
        )
        bases = frozenset(k for k, _ in mine) if lora == "base" else frozenset()
        return Staged(moved, weight_bytes, bases)

    # --- checkpoints ----------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """``{"model": ..., "optimizer": ...}`` state dicts (this rank's shards)."""
        return part_state(self.model, self.optimizer)

    def load(self, ckpt_dir: Path) -> None:
        """Loads the checkpoint's model and optimizer state (every rank calls this)."""
        load_part(ckpt_dir, self.model, self.optimizer)

    def scheduler_state(self) -> dict[str, Any]:
        return self.scheduler.state_dict()

    def load_scheduler_state(self, state: dict[str, Any]) -> None:
        self.scheduler.load_state_dict(state)

    def hf_files(self) -> dict[str, bytes]:
        """The model's config and generation-config files (for export), by file name."""
        with tempfile.TemporaryDirectory() as tmp:
            self.model.config.save_pretrained(tmp)
            if getattr(self.model, "generation_config", None) is not None:
                self.model.generation_config.save_pretrained(tmp)
            return {p.name: p.read_bytes() for p in Path(tmp).iterdir() if p.is_file()}
