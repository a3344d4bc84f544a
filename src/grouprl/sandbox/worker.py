"""The worker process of a ``WorkerPool``: runs calls sent over a pipe, in threads.

::

    parent ──(call_id, pickled (fn, args, kwargs))──► main thread: recv
                                                          │ up to `concurrency` threads
                                                          ▼
    parent ◄──("ok", call_id, pickled value) | ("err", call_id, kind, type, message)── fn(...)

The process limits its own address space (``RLIMIT_AS``) before it says "ready", and
asks the kernel to kill it when the thread that started it ends (``PR_SET_PDEATHSIG``),
so a parent that is itself killed leaves no worker behind. It exits when the pipe closes.
It ignores SIGINT and SIGTERM (started with them blocked: ``sandbox/signals.py``), which
a terminal's Ctrl-C sends to the run's whole process group.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import inspect
import os
import pickle
import resource
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from grouprl.sandbox.signals import ignore_group_signals

MEMORY_EXIT_CODE = 86
"""Exit code of a worker that ran out of memory where it could not report it."""

_STATE: dict[str, Any] = {}


def worker_state() -> dict[str, Any]:
    """A dict that lives in this worker process for its lifetime (empty in a fresh or
    restarted one): objects kept between calls pinned to one worker (``worker=k``).
    ``WorkerPool.generation(k)`` tells the caller when it was lost."""
    return _STATE


def serve(
    conn, *, memory_mb: int | None, concurrency: int, initializer: Callable[[], Any] | None
) -> None:
    """Entry point of a worker process (``multiprocessing`` spawn target). ``initializer``
    runs before the worker says "ready" (imports that should not count against a call's
    deadline); if it raises, the traceback goes to stderr and the worker serves anyway."""
    ignore_group_signals()  # Ctrl-C and `timeout` signal the run's group: the driver
    # saves, then closes this worker (it must not die, nor print a KeyboardInterrupt)
    _die_with_parent()
    if memory_mb is not None:
        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    if initializer is not None:
        try:
            initializer()
        except BaseException:
            traceback.print_exc()
    send_lock = threading.Lock()

    def send(message: bytes) -> None:
        with send_lock:
            conn.send_bytes(message)

    def run(call_id: int, payload: bytes) -> None:
        try:
            send(_run_call(call_id, payload, memory_mb=memory_mb))
        except MemoryError:
            os._exit(MEMORY_EXIT_CODE)
        except (BrokenPipeError, EOFError, OSError):
            os._exit(0)  # the parent is gone

    send(_dump(("ready", os.getpid())))
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="grouprl-call") as calls:
        while True:
            try:
                call_id, payload = pickle.loads(conn.recv_bytes())
            except (EOFError, OSError):  # the parent closed the pipe or died
                os._exit(0)
            calls.submit(run, call_id, payload)


def _run_call(call_id: int, payload: bytes, *, memory_mb: int | None) -> bytes:
    """The pickled reply to one call; the value is pickled here so that a value that
    cannot be pickled fails the call, not the worker."""
    try:
        fn, args, kwargs = pickle.loads(payload)
        value = fn(*args, **kwargs)
        if inspect.isawaitable(value):
            value = asyncio.run(_awaited(value))
        return _dump(("ok", call_id, _dump(value)))  # unpickled apart: a failure is this call's
    except MemoryError:
        limit = f"address space limit {memory_mb} MB" if memory_mb else "out of memory"
        return _dump(("err", call_id, "memory", "MemoryError", f"MemoryError: {limit}"))
    except BaseException as err:  # SystemExit too: it must not end the worker silently
        return _dump(("err", call_id, "error", type(err).__name__, _one_line(err)))


def _dump(message: Any) -> bytes:
    return pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    if len(text) > 300:
        text = text[:297] + "..."
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _die_with_parent() -> None:
    """Linux: SIGKILL this process when the parent thread that started it ends."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() == 1:  # the parent died before prctl took effect
            os._exit(0)
