"""A few completions per step in ``<run_dir>/samples.jsonl``, to read what the policy writes.

One line per completion: ``{"step": int, "prompt": str, "completion": str,
"reward": float, "reward_parts": {...}, "correct": bool, "finish_reason": str, ...}``;
keys beyond these (e.g. ``weight_version``) are kept as given. ``reward_parts`` is what
the reward was computed from (``types.RewardParts``, docs/rewards.md), e.g.
``{"scores": {"math_answer": 1.0, "format": 0.0}, "functions": 1.0, "overlong": -0.15}``
for a reward of 0.85. A record (a dataclass) is written as its fields that are set (None
and empty ones left out); non-finite floats are written as ``null``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from grouprl.metrics.jsonl import append_jsonl, truncate_jsonl_after

if TYPE_CHECKING:  # types.py imports torch; this package does not
    from grouprl.types import RewardParts

SAMPLES_FILE = "samples.jsonl"


class SampleRecord(TypedDict, total=False):
    """The fields a sample line usually carries (none is enforced)."""

    prompt: str
    completion: str
    reward: float
    reward_parts: RewardParts | dict[str, Any]
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


def _finite(value: object) -> Any:
    """Replace NaN/inf (a reward function that failed) by None, recursively in mappings
    and sequences; a record (a dataclass instance) becomes the mapping of its set fields."""
    if is_dataclass(value) and not isinstance(value, type):
        named = {f.name: getattr(value, f.name) for f in fields(value)}
        return {k: _finite(v) for k, v in named.items() if not _unset(v)}
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _unset(value: object) -> bool:
    return value is None or (isinstance(value, (Mapping, list, tuple)) and not value)
