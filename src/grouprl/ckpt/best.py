"""The best validation's checkpoint (``checkpoint.keep_best``).

    RUN/checkpoints/step_000020/            kept beside the newest disk.keep
    RUN/checkpoints/best.json               {"step": 20, "metric": "eval/accuracy",
                                             "value": 0.85, "mode": "max"}

The run's best so far is part of its trainer state (``trainer.json``), so a resumed
run knows it. The disk tier's ``best.json`` names the step kept for it; the writer
puts it there (atomically) once that step's checkpoint is on disk, and the tier's
pruning, like `grouprl ckpt prune`, skips that step. `grouprl ckpt ls` marks it and
`grouprl export RUN OUT --best` exports it. Ties keep the earlier step.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from grouprl.config.errors import ConfigError

BEST_FILE = "best.json"


@dataclass(frozen=True)
class Best:
    step: int
    metric: str
    value: float
    mode: str  # "max" or "min": checkpoint.best_mode

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Best | None:
        return None if data is None else cls(**data)

    def describe(self) -> str:
        return f"best {self.metric}={self.value:.4g}"


def improved(
    best: Best | None, metrics: Mapping[str, float], *, step: int, metric: str, mode: str
) -> Best | None:
    """The new best if the validation ``metrics`` of ``step`` beat ``best`` (or there is
    none yet, or it ranked another metric or mode); else None. A NaN never wins."""
    if metric not in metrics:
        logged = ", ".join(sorted(k for k in metrics if k.startswith("eval/")))
        raise ConfigError(
            f"checkpoint.best_metric={metric!r} is not among the validation's metrics "
            f"({logged}). Fix: choose one of those, e.g. checkpoint.best_metric=eval/accuracy."
        )
    value = float(metrics[metric])
    if math.isnan(value):
        return None
    if best is not None and (best.metric, best.mode) == (metric, mode):
        beats = value > best.value if mode == "max" else value < best.value
        if not beats:
            return None
    return Best(step=step, metric=metric, value=value, mode=mode)


def read_best(root: Path) -> Best | None:
    """The best checkpoint a disk tier directory keeps; None if it names none."""
    try:
        return Best.from_dict(json.loads((root / BEST_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def write_best(root: Path, best: Best) -> None:
    tmp = root / f".{BEST_FILE}.tmp"
    tmp.write_text(json.dumps(asdict(best), indent=1))
    os.replace(tmp, root / BEST_FILE)
