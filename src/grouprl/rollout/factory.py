"""Build the rollout engine that ``rollout.engine`` names, in this process."""

from __future__ import annotations

import torch

from grouprl.config.schema import RunConfig
from grouprl.rollout.base import RolloutEngine
from grouprl.rollout.engines import EngineUnavailableError, build_here, shares_training_gpu

__all__ = ["EngineUnavailableError", "make_engine"]


def make_engine(
    cfg: RunConfig,
    *,
    model_dir: str,
    tokenizer,
    policy_model=None,
    device: torch.device,
    cache_dir: str | None = None,
) -> RolloutEngine:
    """The engine for ``cfg.rollout.engine`` in this process, on ``device``; it sleeps
    while training when it shares the training GPU.

    ``model_dir`` is a local Hugging Face model directory (vLLM loads it);
    ``policy_model`` is the trainer's model, which the ``hf`` engine copies
    (loaded from ``model_dir`` when not given); ``cache_dir`` receives vLLM's
    and inductor's caches. A run's replicas (``rollout.replicas``) are built by
    ``rollout.setup.start_engine``.
    """
    return build_here(
        cfg,
        model_dir=model_dir,
        tokenizer=tokenizer,
        policy_model=policy_model,
        device=device,
        cache_dir=cache_dir,
        sleeps=shares_training_gpu(cfg, training_on_gpu=device.type == "cuda"),
    )
