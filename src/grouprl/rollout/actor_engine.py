"""The rollout engine in a Ray actor of its own: generation on GPUs no training rank uses
(``rollout.gpus``, e.g. 1 of 8) or, on CPU, in a process of its own.

    driver ──generate(prompts)──► RolloutHost actor (num_gpus=rollout.gpus) ─► engine
           ──update_weights(w, v)─►   the configured engine (vllm, hf) built inside it;
                                      Ray hands it its GPUs (CUDA_VISIBLE_DEVICES)

``ActorEngine`` is the driver's handle; it is a ``RolloutEngine`` like the others, so
the loop and the episode runner do not know where generation happens.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from torch import Tensor

from grouprl.cluster.connection import PLACEMENT_TIMEOUT_S
from grouprl.config.schema import RunConfig
from grouprl.rollout.base import SamplingSettings
from grouprl.types import Completion


class RolloutHost:
    """The actor's body: builds the configured engine where Ray placed it."""

    def __init__(self, cfg: RunConfig, *, model_dir: str, cache_dir: str | None) -> None:
        from transformers import AutoTokenizer

        from grouprl.device import resolve_device
        from grouprl.rollout.engines import build_here

        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        device = resolve_device("cuda" if cfg.rollout.gpus else "cpu")
        here = cfg.rollout.model_copy(update={"placement": "driver"})  # this actor drives it
        self.engine = build_here(
            cfg.model_copy(update={"rollout": here}),
            model_dir=model_dir,
            tokenizer=tokenizer,
            device=device,
            cache_dir=cache_dir,
        )

    def generate(self, prompts: list[list[int]], settings: SamplingSettings):
        return self.engine.generate(prompts, settings)

    def update_weights(self, weights: dict[str, Tensor], version: int) -> None:
        self.engine.update_weights(weights.items(), version=version)

    def close(self) -> None:
        self.engine.close()


class ActorEngine:
    def __init__(self, actor: Any) -> None:
        self.actor = actor
        self._version = 0

    @classmethod
    def start(cls, cfg: RunConfig, *, model_dir: str, cache_dir: str | None) -> ActorEngine:
        import ray

        from grouprl.cluster.connection import connect

        temp = Path(cache_dir) / "ray" if cache_dir is not None else None
        connect(cfg.cluster, world_size=cfg.world_size, temp_dir=temp)
        r = cfg.rollout
        actor = (
            ray.remote(RolloutHost)
            # no CPU reservation: the ranks hold the CPU slots; an engine in the driver
            # holds none either
            .options(num_gpus=r.gpus, num_cpus=0)
            .remote(cfg, model_dir=model_dir, cache_dir=cache_dir)
        )
        engine = cls(actor)
        engine._get(actor.__ray_ready__.remote(), "start", timeout=PLACEMENT_TIMEOUT_S)
        return engine

    @property
    def weight_version(self) -> int:
        return self._version

    def generate(
        self, prompts: list[list[int]], settings: SamplingSettings
    ) -> list[list[Completion]]:
        return self._get(self.actor.generate.remote(prompts, settings), "generate")

    def update_weights(self, named_tensors: Iterable[tuple[str, Tensor]], *, version: int) -> None:
        weights = {name: tensor.detach().cpu() for name, tensor in named_tensors}
        self._get(self.actor.update_weights.remote(weights, version), "update_weights")
        self._version = version

    def released(self) -> AbstractContextManager[None]:
        """The actor's GPUs are its own: nothing to release."""
        return nullcontext()

    def close(self) -> None:
        import ray

        if self.actor is None:
            return
        try:
            self._get(self.actor.close.remote(), "close")
        finally:
            ray.kill(self.actor)
            self.actor = None

    def _get(self, ref, what: str, *, timeout: float | None = None):
        import ray

        from grouprl.cluster.connection import WorkerFailed, reason

        try:
            return ray.get(ref, timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            ray.kill(self.actor)
            raise WorkerFailed(
                f"the rollout engine's actor was not placed within {timeout:.0f} s: the "
                "cluster has no node with rollout.gpus free GPUs; add one or lower rollout.gpus"
            ) from None
        except Exception as err:
            raise WorkerFailed(
                f"the rollout engine's actor failed during {what}: {reason(err)}"
            ) from None
