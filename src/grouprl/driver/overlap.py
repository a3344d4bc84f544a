"""One step off-policy: the engine generates batch k+1 while the trainer learns on batch k.

    step k:   take batch k (generated during step k-1, weights v(k-2))
              start batch k+1 ──► rollout thread: engine.generate (weights v(k-1))
              train on batch k    (policy v(k-1) -> v(k))
              wait for batch k+1, then push v(k) into the engine

Each batch lags the policy it trains by one weight version (``rollout.max_staleness=1``);
the policy loss corrects for it with truncated importance weights against the engine's
sampling logprobs (``algo.tis_cap``). The engine never changes weights mid-batch: the
push waits for the generation in flight. The first step generates synchronously.

A checkpoint at step k records the sampler as it was before batch k+1 was drawn, so a
resumed run draws the same prompts (it generates them with the restored weights v(k),
where the interrupted run used v(k-1)).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from grouprl.types import Trajectory

Generated = tuple[list[Trajectory], dict[str, float]]


class RolloutAhead:
    """The next step's batch, generated on a thread of its own."""

    def __init__(self, generate: Callable[[int], Generated], sampler) -> None:
        self.generate, self.sampler = generate, sampler
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="rollout-ahead")
        self._pending: tuple[int, Future[Generated]] | None = None
        self._sampler_before: dict[str, Any] | None = None

    def start(self, step: int) -> None:
        """Starts generating ``step``'s batch with the engine's current weights."""
        assert self._pending is None, "one batch ahead at most"
        self._sampler_before = self.sampler.state_dict()
        self._pending = (step, self._pool.submit(self.generate, step))

    def take(self, step: int) -> Generated | None:
        """``step``'s batch if it was started ahead (waiting for it), else None."""
        if self._pending is None:
            return None
        started, future = self._pending
        assert started == step, f"batch {started} is ahead, step {step} asked for"
        self._pending = None
        self._sampler_before = None
        started_wait = time.perf_counter()
        trajectories, metrics = future.result()
        metrics["time/wait_generate_s"] = time.perf_counter() - started_wait
        return trajectories, metrics

    def settle(self) -> None:
        """Waits until the generation in flight is done (the engine is then idle); its
        error, if any, is raised here."""
        if self._pending is not None:
            self._pending[1].result()

    def sampler_state(self) -> dict[str, Any]:
        """The sampler as a checkpoint should record it: before the batch ahead."""
        if self._sampler_before is not None:
            return self._sampler_before
        return self.sampler.state_dict()

    def close(self) -> None:
        """Lets a generation in flight finish (the engine closes after this), drops it."""
        if self._pending is not None:
            self._pending[1].exception()
            self._pending = None
        self._pool.shutdown(wait=True)
