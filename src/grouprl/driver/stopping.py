"""How the rollout stream (``driver/stream.py``) stops the round in flight when the run
ends or is preempted, and what its log says the stop waits for."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

from grouprl.config.replica_timeouts import Bound, step_generation_bound
from grouprl.config.schema import RunConfig


@dataclass(frozen=True)
class Stopping:
    """How the stream stops a round in flight when it stops (the run ends or is
    preempted). ``abort`` is the engine's (``ReplicaSet.aborting``): inside it, every
    generation stops after its segment in flight, on every replica. With
    ``segment_tokens`` (``rollout.partial_rollout_tokens``) that is within one segment;
    without, a generation is one engine call that cannot be interrupted (hf ``generate``,
    vLLM's offline ``LLM.generate``), and ``close`` waits for it: at most ``bound`` (a
    replica's call bound, ``config/replica_timeouts.py``; None: an engine in the driver,
    which has none). A multi-turn episode stops before its next turn's call either way."""

    abort: Callable[[], AbstractContextManager[None]] = nullcontext
    segment_tokens: int | None = None
    bound: Bound | None = None

    @classmethod
    def of(
        cls, cfg: RunConfig, *, abort: Callable[[], AbstractContextManager[None]], on_gpu: bool
    ) -> Stopping:
        """The run's: ``abort`` the engine's, ``on_gpu`` whether the replicas use GPUs."""
        bound = step_generation_bound(cfg, on_gpu=on_gpu) if cfg.rollout_in_actors else None
        return cls(abort, cfg.rollout.partial_rollout_tokens, bound)

    def line(self, *, index: int, prompts: int) -> str:
        """What stopping round ``index`` (of ``prompts`` prompts) waits for, for the log."""
        head = f"the rollout stream stops: round {index} ({prompts} prompts)"
        if self.segment_tokens is not None:
            return (
                f"{head} stops after its segment in flight (rollout.partial_rollout_tokens="
                f"{self.segment_tokens}); a resumed run generates it again"
            )
        limit = (
            f"up to {self.bound.seconds:.0f} s ({self.bound.rule})"
            if self.bound is not None
            else "not bounded (an engine in the driver has no call bound)"
        )
        return (
            f"{head} is generating and its engine call cannot be interrupted: waiting for "
            f"the round in flight: {limit}; set rollout.partial_rollout_tokens to stop "
            "within one segment"
        )
