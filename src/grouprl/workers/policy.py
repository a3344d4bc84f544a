"""The policy role: its model (a shard of it on a multi-rank group), AdamW, the LR
schedule, and the update of one training step."""

from __future__ import annotations

import tempfile
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from grouprl.ckpt.resume import load_part, part_state
from grouprl.config.schema import RunConfig
from grouprl.device import resolve_dtype
from grouprl.engines.base import RolloutEngine
from grouprl.engines.replicas import push
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
        base model's names). Every rank must call this (the shards are gathered one
        parameter at a time); the ranks in ``on`` get them on the CPU, the others None.

        ``dtype``: the engine's. A shard is cast before its all-gather and a GPU tensor
        before its copy to the host, so a bfloat16 engine costs half the bytes to move;
        LoRA's base weights and adapters are merged in float32 and cast after. One CPU
        process hands over its live tensors uncast: the engine casts them in its one
        copy."""
        from torch.distributed.tensor import DTensor

        keep = self.rank.rank in on
        full: dict[str, Tensor] = {}
        for name, param in self.model.named_parameters():
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
            if not keep:
                continue
            if cast and t.device.type != "cpu":  # before the copy to the host
                t = t.to(dtype)
            # one process: the live tensors, as the engine here copies them
            full[name] = t.cpu() if self.rank.distributed else t
        if not keep:
            return None
        if has_lora(self.model):
            full = merged_weights(full, scaling=lora_scaling(self.model))
            if dtype is not None and (self.rank.distributed or self.rank.device != "cpu"):
                full = {name: t.to(dtype) for name, t in full.items()}
        return full

    def push_weights(
        self, targets: dict[int, list[tuple[int, RolloutEngine]]], *, version: int
    ) -> dict[int, int]:
        """Gathers the full weights on each node's leader rank (the keys of ``targets``),
        which pushes them to its node's rollout replicas, in the engines' dtype (that of
        ``model.dtype`` on this rank's kind of device); returns replica -> the version it
        reports (empty on the other ranks)."""
        dtype = resolve_dtype(self.cfg.model.dtype, torch.device(self.rank.device))
        weights = self.weights(on=frozenset(targets), dtype=dtype)
        if weights is None or not targets[self.rank.rank]:
            return {}
        return push(targets[self.rank.rank], weights, version=version, dtype=dtype)

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
