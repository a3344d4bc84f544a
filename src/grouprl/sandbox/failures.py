"""Why a call in a ``WorkerPool`` returned no value: ``CallFailed`` and its kinds."""

from __future__ import annotations

import signal
from typing import Literal

from grouprl.sandbox.worker import MEMORY_EXIT_CODE

FailureKind = Literal["timeout", "crash", "memory", "error"]


class CallFailed(Exception):
    """A pool call that did not return a value.

    ``kind``: "timeout" (killed at its deadline), "crash" (the worker died: os._exit, a
    signal), "memory" (MemoryError or death at the address-space limit) or "error" (fn
    raised). ``error_type``: the exception's class name for "error", else "TimeoutError",
    "WorkerCrash" or "MemoryError". ``exit_code``: the worker's exit code when it died
    (negative: the signal), else None.
    """

    def __init__(
        self,
        kind: FailureKind,
        message: str,
        *,
        error_type: str | None = None,
        exit_code: int | None = None,
    ) -> None:
        super().__init__(message)
        self.kind: FailureKind = kind
        self.message = message
        self.error_type = error_type or _DEFAULT_TYPES[kind]
        self.exit_code = exit_code

    def __reduce__(self):
        return (_call_failed, (self.kind, self.message, self.error_type, self.exit_code))


_DEFAULT_TYPES = {
    "timeout": "TimeoutError",
    "crash": "WorkerCrash",
    "memory": "MemoryError",
    "error": "Exception",
}


def _call_failed(kind, message, error_type, exit_code) -> CallFailed:
    return CallFailed(kind, message, error_type=error_type, exit_code=exit_code)


def death(code: int | None, *, memory_mb: int | None) -> tuple[FailureKind, str]:
    """The kind and one-line message of a worker's death with exit ``code``."""
    if code == MEMORY_EXIT_CODE:
        limit = f"its address space limit {memory_mb} MB" if memory_mb else "memory"
        return "memory", f"worker ran out of memory ({limit})"
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "unknown"
        hint = " (killed from outside, or the kernel's OOM killer?)" if -code == 9 else ""
        return "crash", f"worker killed by signal {-code} ({name}){hint}"
    return "crash", f"worker exited with code {code} (os._exit?)"
