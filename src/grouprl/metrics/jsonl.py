"""Metrics as JSON lines: one object per log call, readable without grouprl.

Each line of ``metrics.jsonl`` is ``{"step": int, "wall_time": float, <name>: <float|null>}``.
Non-finite values (NaN, inf) are written as ``null`` so the file stays strict JSON
for ``jq`` and pandas; every other sink receives the raw float. A step may appear
on several lines (training metrics and validation metrics are separate calls).

The file is appended to, so a resumed run continues it; ``truncate_after`` first
drops the lines a crashed run wrote past the checkpoint it resumes from.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.jsonl"
RESERVED_KEYS = frozenset({"step", "wall_time"})


class JsonlSink:
    """Appends one JSON object per ``log`` call to ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _drop_torn_tail(self.path)

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        record: dict[str, Any] = {"step": step, "wall_time": round(time.time(), 3)}
        record.update({name: _finite_or_none(value) for name, value in metrics.items()})
        append_jsonl(self.path, [record])

    def truncate_after(self, step: int) -> int:
        """Drop lines with ``"step" > step``; returns how many were dropped."""
        return truncate_jsonl_after(self.path, step)

    def close(self) -> None:
        """Nothing is held open: every ``log`` opens, appends and closes the file."""


def append_jsonl(path: Path, records: Iterable[Mapping[str, Any]]) -> None:
    """Append records as lines in one write, so a crash tears at most the last line."""
    text = "".join(json.dumps(r, ensure_ascii=False, default=_to_json) + "\n" for r in records)
    with path.open("a", encoding="utf-8") as f:
        f.write(text)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Read every object; an unparseable last line (a write torn by a crash) is skipped."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    records = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                break
            raise ValueError(f"{path}:{i + 1} is not valid JSON: {line[:80]!r}") from None
    return records


def truncate_jsonl_after(path: Path, step: int) -> int:
    """Rewrite ``path`` keeping only records with ``step <= step`` (atomic replace)."""
    path = Path(path)
    if not path.exists():
        return 0
    records = read_jsonl(path)
    kept = [r for r in records if not isinstance(r.get("step"), int) or r["step"] <= step]
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    append_jsonl(tmp, kept)
    os.replace(tmp, path)
    return len(records) - len(kept)


def _drop_torn_tail(path: Path) -> None:
    """Cut a final line with no newline (a torn write) so the next append starts clean."""
    if not path.exists() or path.stat().st_size == 0:
        return
    data = path.read_bytes()
    if data.endswith(b"\n"):
        return
    with path.open("r+b") as f:
        f.truncate(data.rfind(b"\n") + 1)


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _to_json(value: Any) -> Any:
    """Tensors, numpy scalars and arrays become numbers and lists; other types fail loudly."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot write {type(value).__name__} to JSON lines: {value!r:.80}")
