"""The critic role (PPO): a value model with its own AdamW."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from grouprl.ckpt.resume import load_part, part_state
from grouprl.config.schema import RunConfig
from grouprl.types import TrainingBatch
from grouprl.workers.common import (
    autocast,
    loads_weights,
    my_scores,
    place_optimizer_states,
    prepare,
)
from grouprl.workers.optim import make_optimizer
from grouprl.workers.rank import Rank
from grouprl.workers.update import MicroBatching
from grouprl.workers.value_model import ValueScorer, critic_update, load_critic


class CriticWorker:
    """One rank of the critic."""

    def __init__(self, rank: Rank, *, cfg: RunConfig) -> None:
        assert cfg.critic is not None, "a CriticWorker needs a critic: section"
        self.rank, self.cfg, self.critic_cfg = rank, cfg, cfg.critic
        self.model = load_critic(
            cfg.critic, cfg.model, device=torch.device("cpu"), weights=loads_weights(rank)
        )
        self.scorer = ValueScorer(self.model, packed=cfg.train.packing)
        prepare(self.scorer, self.model, rank=rank, cfg=cfg)
        self.optimizer = make_optimizer(self.model, cfg.critic)
        place_optimizer_states(self.optimizer, rank=rank, cfg=cfg)
        self.autocast = autocast(cfg, rank)

    def values(self, batch: TrainingBatch) -> Tensor:
        """Values of this rank's block of ``batch`` (CPU)."""
        return my_scores(self.scorer, batch, rank=self.rank, cfg=self.cfg, autocast=self.autocast)

    def update(self, batch: TrainingBatch, *, mini_batch_size: int) -> dict[str, float]:
        """Regresses values on ``batch.returns_BT``; metrics summed over the ranks."""
        self.scorer.train()
        return critic_update(
            scorer=self.scorer,
            optimizer=self.optimizer,
            batch=batch.to(torch.device(self.rank.device)),
            cfg=self.critic_cfg,
            num_iterations=self.cfg.algo.num_iterations,
            mini_batch_size=mini_batch_size,
            micro=MicroBatching.of(self.cfg.train),
            autocast=self.autocast,
            rank=self.rank,
        )

    def state(self) -> dict[str, Any]:
        """``{"critic": ..., "critic_optimizer": ...}`` (this rank's shards)."""
        return part_state(self.model, self.optimizer, part="critic")

    def load(self, ckpt_dir: Path) -> None:
        load_part(ckpt_dir, self.model, self.optimizer, part="critic")
