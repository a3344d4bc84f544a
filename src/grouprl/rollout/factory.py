"""Build the rollout engine that ``rollout.engine`` names, here or in an actor of its own."""

from __future__ import annotations

import torch

from grouprl.config.schema import RunConfig
from grouprl.rollout.actor_engine import ActorEngine
from grouprl.rollout.base import RolloutEngine
from grouprl.rollout.engines import EngineUnavailableError, build_here, placed_in_actor

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
    """The engine for ``cfg.rollout.engine``, here or in a Ray actor of its own
    (``rollout.placement``).

    ``model_dir`` is a local Hugging Face model directory (vLLM loads it);
    ``policy_model`` is the trainer's model, which the ``hf`` engine copies
    (loaded from ``model_dir`` when not given); ``cache_dir`` receives vLLM's
    and inductor's caches.
    """
    if placed_in_actor(cfg):
        return ActorEngine.start(cfg, model_dir=str(model_dir), cache_dir=cache_dir)
    return build_here(
        cfg,
        model_dir=model_dir,
        tokenizer=tokenizer,
        policy_model=policy_model,
        device=device,
        cache_dir=cache_dir,
    )
