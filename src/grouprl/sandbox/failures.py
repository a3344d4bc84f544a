"""Why a call in a ``WorkerPool`` returned no value: ``CallFailed`` and its kinds."""

from __future__ import annotations

import signal
from typing import Literal

from grouprl.sandbox.worker import MEMORY_EXIT_CODE

FailureKind = Literal["timeout", "crash", "memory", "error"]


class CallFailed(Exception):
    """A pool call that did not return a value.

    ``kind``: "timeout" (killed at its deadline, or abandoned), "crash" (the worker died:
    os._exit, a signal), "memory" (MemoryError, or the worker killed past its memory
    limit) or "error" (fn raised). ``error_type``: the exception's class name for
    "error", else "TimeoutError", "WorkerCrash" or "MemoryError". ``exit_code``: the
    worker's exit code when it died (negative: the signal), else None. ``own``: the
    failure is surely this call's (it raised, timed out or was abandoned, or it was the
    only call in flight on a worker that died); False when its worker died with several
    calls in flight, any of which may have killed it (see ``WorkerPool.submit``'s
    ``retry_lost``).
    """

    def __init__(
        self,
        kind: FailureKind,
        message: str,
        *,
        error_type: str | None = None,
        exit_code: int | None = None,
        own: bool = True,
    ) -> None:
        super().__init__(message)
        self.kind: FailureKind = kind
        self.message = message
        self.error_type = error_type or _DEFAULT_TYPES[kind]
        self.exit_code = exit_code
        self.own = own

    def __reduce__(self):  # its __init__ takes more than ``args``: the rest as state
        return (CallFailed, (self.kind, self.message), self.__dict__)


_DEFAULT_TYPES = {
    "timeout": "TimeoutError",
    "crash": "WorkerCrash",
    "memory": "MemoryError",
    "error": "Exception",
}


def death(
    code: int | None, *, memory_mb: int | None, memory_limit: str = "rss"
) -> tuple[FailureKind, str]:
    """The kind and one-line message of a worker's death with exit ``code``."""
    if code == MEMORY_EXIT_CODE:
        limited = memory_mb is not None and memory_limit == "address_space"
        limit = f"its address space limit {memory_mb} MB" if limited else "memory"
        return "memory", f"worker ran out of memory ({limit})"
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "unknown"
        hint = " (killed from outside, or the kernel's OOM killer?)" if -code == 9 else ""
        return "crash", f"worker killed by signal {-code} ({name}){hint}"
    return "crash", f"worker exited with code {code} (os._exit?)"
