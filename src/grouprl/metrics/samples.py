"""A few completions per step in ``<run_dir>/samples.jsonl``, to read what the policy writes.

One line per completion: ``{"step": int, "prompt": str, "completion": str,
"reward": float, "reward_parts": {function name: float}, "correct": bool,
"finish_reason": str, ...}``; keys beyond these (e.g. ``weight_version``) are
kept as given. Non-finite floats are written as ``null``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypedDict

from grouprl.metrics.jsonl import append_jsonl, truncate_jsonl_after

SAMPLES_FILE = "samples.jsonl"


class SampleRecord(TypedDict, total=False):
    """The fields a sample line usually carries (none is enforced)."""

    prompt: str
    completion: str
    reward: float
    reward_parts: dict[str, float]
    correct: bool
    finish_reason: str


class SamplesWriter:
    """Appends sample records tagged with their step; ``truncate_after`` for resume."""

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / SAMPLES_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, step: int, records: list[SampleRecord] | list[dict[str, Any]]) -> None:
        if records:
            append_jsonl(self.path, [{"step": step, **_finite(r)} for r in records])

    def truncate_after(self, step: int) -> int:
        """Drop lines with ``"step" > step``; returns how many were dropped."""
        return truncate_jsonl_after(self.path, step)


def _finite(value: Any) -> Any:
    """Replace NaN/inf (a reward function that failed) by None, recursively in mappings."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    return value
