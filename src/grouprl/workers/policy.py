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
from grouprl.engines.base import RolloutEngine
from grouprl.engines.push import Staged
from grouprl.metrics.telemetry import Hardware, ModelShape, memory_now, peak_flops
from grouprl.types import TrainingBatch
from grouprl.workers.common import (
    autocast,
    compute_dtype,
    loads_weights,
    my_scores,
    place_optimizer_states,
    prepare,
)
from grouprl.workers.logprobs import TokenScorer
from grouprl.workers.lora import adapters_off, add_lora
from grouprl.workers.model import load_causal_lm
from grouprl.workers.optim import make_optimizer, make_scheduler
from grouprl.workers.rank import Rank
from grouprl.workers.update import policy_update
from grouprl.workers.weight_export import stage_weights, weight_buckets


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
        self,
        batch: TrainingBatch,
        *,
        beta: float,
        mini_batch_size: int,
        version: int,
        entropy_coef: float = 0.0,
    ) -> dict[str, float]:
        """The policy's optimizer steps for one training step, then one LR-schedule step.
        ``version`` is the weight version being trained (staleness per token is measured
        from it); ``beta`` and ``entropy_coef``: the step's KL and entropy-bonus
        coefficients. Metrics are summed over the ranks (the same on every rank)."""
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
            entropy_coef=entropy_coef,
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
        peak, source = peak_flops(device, compute_dtype(self.cfg, self.rank))
        return Hardware(ModelShape.of(self.model), peak, source)

    def memory(self) -> dict[str, float]:
        """This rank's memory now and at its peak since the last call (GiB)."""
        return memory_now(torch.device(self.rank.device))

    # --- weights for rollout engines (``weight_export.py``) ------------------------------

    def weights(
        self, *, on: frozenset[int] = frozenset({0}), dtype: torch.dtype | None = None
    ) -> dict[str, Tensor] | None:
        """Full weights by parameter name, for rollout engines (LoRA merged in, under the
        base model's names): ``weight_export.weight_buckets`` in one dict. Every rank must
        call this; the ranks in ``on`` get them on the CPU, the others None."""
        full: dict[str, Tensor] = {}
        for bucket in weight_buckets(self.model, self.rank, on=on, dtype=dtype, bucket_bytes=None):
            full.update(bucket)
        return full if self.rank.rank in on else None

    def stage_weights(
        self,
        targets: dict[int, list[tuple[int, RolloutEngine]]],
        *,
        version: int,
        lora_bases: frozenset[int] = frozenset(),
    ) -> Staged | None:
        """``weight_export.stage_weights`` of this rank's model (``targets``: each node's
        leader rank -> its replicas)."""
        return stage_weights(
            self.model, self.rank, self.cfg, targets, version=version, lora_bases=lora_bases
        )

    def hf_files(self) -> dict[str, bytes]:
        """The model's config and generation-config files (for export), by file name."""
        with tempfile.TemporaryDirectory() as tmp:
            self.model.config.save_pretrained(tmp)
            if self.model.generation_config is not None:
                self.model.generation_config.save_pretrained(tmp)
            return {p.name: p.read_bytes() for p in Path(tmp).iterdir() if p.is_file()}

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
