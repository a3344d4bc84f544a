"""A ``WorkerPool``'s records (pool.py): a call on its way to a worker (``Call``), a worker
slot with its process and its calls in flight (``Slot``), and the outcomes the manager
delivers outside its lock (``Resolved``)."""

from __future__ import annotations

import itertools
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

_CALL_IDS = itertools.count()


@dataclass(eq=False, kw_only=True)
class Call:
    """One submitted call: its pickled ``(fn, args, kwargs)``, its future and how it runs
    (``retry_lost``: never for a call pinned to a worker)."""

    payload: bytes
    deadline_s: float | None
    pinned: int | None
    alone: bool = False
    retry_lost: bool = False
    id: int = field(default_factory=lambda: next(_CALL_IDS))
    future: Future = field(default_factory=Future)
    deadline_at: float = float("inf")

    def __post_init__(self) -> None:
        self.retry_lost = self.retry_lost and self.pinned is None

    def claim(self) -> bool:
        """Mark the future running (a call queued again after a lost worker already is);
        False when the caller cancelled it."""
        return self.future.running() or self.future.set_running_or_notify_cancel()


class Slot:
    """Worker ``index``: its current process (None between processes) and calls."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.generation = 0
        self.restart_wanted = False
        self.reset()

    def reset(self) -> None:
        self.process: Any = None  # a spawn context's Process
        self.conn: Any = None  # its end of the worker's pipe
        self.ready = False
        self.started_at = 0.0
        self.retiring = False  # a call timed out or ran out of memory: replace when idle
        self.abandoned = False  # abandon() failed a call it runs: kill it now
        self.inflight: dict[int, Call] = {}


Resolved = list[tuple[Future, object, BaseException | None]]
"""Futures to resolve outside the lock (a done-callback may submit again): value or error."""

STAT_OF = {"timeout": "timeouts", "crash": "crashes", "memory": "memory", "error": "errors"}


def resolve(resolved: Resolved) -> None:
    for future, value, error in resolved:
        if future.done():
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)
