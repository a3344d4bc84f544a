"""Preemption: SIGTERM or SIGINT asks the run to save and leave.

The first signal sets ``requested``; the training loop sees it when the current step
ends, saves to disk (and S3, if configured) and exits with ``EXIT_PREEMPTED`` (75,
"temporary failure: run it again"). If that takes longer than
``checkpoint.grace_period_s``, or a second signal arrives, the process exits at once
with 128 + the signal number, keeping whatever checkpoints were already complete, and
SIGKILLs the sessions its engine processes run in.

Ctrl-C in a terminal (or `timeout`) signals the whole process group: the processes the
run starts ignore it or run in a session of their own (``grouprl.host.sessions``), so
they keep working until the driver closes them after the save.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from grouprl.host.sessions import kill_sessions

logger = logging.getLogger(__name__)

EXIT_PREEMPTED = 75
SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Preempted(Exception):
    """Raised by the loop after the emergency save; the CLI exits with EXIT_PREEMPTED."""

    exit_code = EXIT_PREEMPTED


class Preemption:
    """Installs the handlers (main thread only) for the lifetime of a ``with`` block."""

    def __init__(self, grace_period_s: float) -> None:
        self.grace_period_s = grace_period_s
        self.signum: int | None = None
        self.at: float | None = None
        self._previous: dict[int, Callable[[int, FrameType | None], Any] | int | None] = {}
        self._timer: threading.Timer | None = None

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def time_left(self) -> float:
        assert self.at is not None
        return max(0.0, self.grace_period_s - (time.monotonic() - self.at))

    def __enter__(self) -> Preemption:
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum: int, frame) -> None:
        name = signal.Signals(signum).name
        if self.requested:
            _exit_now(signum, f"{name} again: exiting at once")
        self.signum, self.at = signum, time.monotonic()
        sys.stderr.write(
            f"{name}: saving a checkpoint when this step ends, then exiting with code "
            f"{EXIT_PREEMPTED} (within checkpoint.grace_period_s={self.grace_period_s:g}; "
            "send it again to exit at once)\n"
        )
        self._timer = threading.Timer(
            self.grace_period_s,
            _exit_now,
            args=(signum, "checkpoint.grace_period_s ran out before the save finished"),
        )
        self._timer.daemon = True
        self._timer.start()


def _exit_now(signum: int, why: str) -> None:
    sys.stderr.write(f"{why}; exit code {128 + signum}\n")
    sys.stderr.flush()
    kill_sessions()  # the engine processes the signal did not reach: no orphans
    os._exit(128 + signum)
