"""What a checkpoint holds besides tensors: the trainer's plain state, as JSON.

Everything here is JSON (``trainer.json``): step, weight version, sampler
position, LR scheduler, the RNG states (Python, NumPy, torch CPU and CUDA),
algorithm state (the adaptive KL coefficient), the validation before the first
step, the best validation so far (``checkpoint.keep_best``), and with a rollout stream
its buffer and unfinished prompts (trajectories as ``types.trajectory_to_dict``
records). Nothing in a checkpoint is ever unpickled.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

TRAINER_FILE = "trainer.json"


class CheckpointError(RuntimeError):
    user_error = True


@dataclass
class TrainerState:
    step: int
    weight_version: int
    sampler: dict[str, Any]
    scheduler: dict[str, Any]
    rng: dict[str, Any]  # python and numpy (JSON); torch's are tensors in the shards
    eval_before: dict[str, float]  # validation before the first step, for the final summary
    algo: dict[str, float] = field(default_factory=dict)  # e.g. the adaptive KL coefficient
    best: dict[str, Any] | None = None  # checkpoint.keep_best: ckpt.best.Best as a dict
    idle_steps: int = 0  # steps in a row that trained no sample (trainer.max_idle_steps)
    exploration: dict[str, Any] | None = None  # algo/entropy.ExplorationWatch's points
    stream: dict[str, Any] | None = None
    """rollout.max_staleness >= 1: the rollout stream (``driver/stream.Stream.state_dict``):
    its finished groups, the prompts admitted but unfinished, its counters; JSON too."""

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=1).encode()

    def write(self, path: Path) -> None:
        path.write_bytes(self.to_json())

    @classmethod
    def read(cls, path: Path) -> TrainerState:
        return cls(**json.loads(path.read_text()))


def rng_state() -> dict[str, Any]:
    """Python, NumPy and torch (CPU, CUDA) generator states as JSON values."""
    import numpy as np  # late: `grouprl ckpt ls` reads manifests without torch
    import torch

    version, keys, gauss = random.getstate()
    np_state = np.random.get_state(legacy=True)
    assert isinstance(np_state, tuple)  # legacy=True: a tuple for the legacy MT19937
    kind, np_keys, pos, has_gauss, cached = np_state
    state = {
        "python": [version, list(keys), gauss],
        "numpy": [kind, np_keys.tolist(), int(pos), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state().tolist(),
    }
    if torch.cuda.is_available():
        state["cuda"] = [s.tolist() for s in torch.cuda.get_rng_state_all()]
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    import numpy as np
    import torch

    version, keys, gauss = state["python"]
    random.setstate((version, tuple(keys), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))
    cuda = state.get("cuda")
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all([torch.tensor(s, dtype=torch.uint8) for s in cuda])
