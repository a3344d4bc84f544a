"""The reference role: a frozen copy of the initial policy that scores batches for KL.

The reference scores tokens at the sampling temperature, ``log_softmax(logits /
rollout.temperature)``, as the policy does, so the KL compares the two tempered
distributions (at T = 1 nothing changes). TRL (``_get_per_token_logps_and_entropies``
for the reference model too) and verl (the batch's ``temperature`` reaches
``compute_ref_log_prob``) both do this; a LoRA policy's reference (adapters off) is
scored by the policy's own scorer, at the same temperature.
"""

from __future__ import annotations

import torch
from torch import Tensor

from grouprl.config.schema import RunConfig
from grouprl.types import TrainingBatch
from grouprl.workers.common import autocast, compute_dtype, loads_weights, my_scores, prepare
from grouprl.workers.logprobs import TokenScorer
from grouprl.workers.model import load_causal_lm
from grouprl.workers.rank import Rank


class ReferenceWorker:
    """One rank of the reference model (in the engine's dtype, no gradients)."""

    def __init__(self, rank: Rank, *, cfg: RunConfig) -> None:
        self.rank, self.cfg = rank, cfg
        dtype = compute_dtype(cfg, rank)
        self.model = load_causal_lm(
            cfg.model, dtype=dtype, device=torch.device("cpu"), weights=loads_weights(rank)
        )
        self.model.eval().requires_grad_(False)
        self.scorer = TokenScorer.of(self.model, cfg)
        prepare(self.scorer, self.model, rank=rank, cfg=cfg)
        self.autocast = autocast(cfg, rank)

    def logprobs(self, batch: TrainingBatch) -> Tensor:
        """Reference logprobs of this rank's block of ``batch`` (CPU)."""
        return my_scores(
            self.scorer.loss_logprobs, batch, rank=self.rank, cfg=self.cfg, autocast=self.autocast
        )
