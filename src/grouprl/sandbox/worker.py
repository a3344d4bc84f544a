"""The worker process of a ``WorkerPool``: runs calls sent over a pipe, in threads.

::

    parent ──(call_id, pickled (fn, args, kwargs))──► main thread: recv
                                                          │ up to `concurrency` threads
                                                          ▼
    parent ◄──("ok", call_id, pickled value) | ("err", call_id, kind, type, message)── fn(...)
                                                          │ a coroutine: awaited on the
                                                          ▼ process's one event loop
                                                 loop thread (lives as long as the process)

Before it says "ready" the process leads a session and process group of its own (the
pool kills the group and every descendant together: ``host/tree.py``), becomes a child
subreaper (an orphaned descendant is reparented to it, not to init, so the pool still
finds it), leaves the network when asked (``sandbox/isolation.py``; and the host's Unix
sockets: ``sandbox/seccomp.py``), asks the kernel to
kill it when the thread that started it ends (``PR_SET_PDEATHSIG``), and, for
``memory_limit="address_space"``, limits its address space (``RLIMIT_AS``; the default,
``"rss"``, is watched by the pool). It exits when the pipe closes. It ignores SIGINT and
SIGTERM (started with them blocked: ``host/sessions.py``). Native math libraries (torch's
OpenMP, MKL, OpenBLAS) run on one thread in it: ``ONE_THREAD``.
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
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from grouprl.host.sessions import ignore_group_signals
from grouprl.sandbox.isolation import enter_own_network
from grouprl.sandbox.seccomp import load_worker_filter

MEMORY_EXIT_CODE = 86
"""Exit code of a worker that ran out of memory where it could not report it."""

ONE_THREAD = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
"""Set to 1 in each worker before any call imports torch or numpy: the workers are the
parallelism (``sandbox.workers``), and each at its library's default (a thread per core,
or the run's ``train.num_threads``, which it inherits) beside training oversubscribes the
cores (measured: tiny-arith-judge on 2 cores, 2 reward workers judging one step ahead,
a step's judging 11.1 s -> 0.9 s and the update beside it 10.2 s -> 1.7 s)."""

_STATE: dict[str, Any] = {}


def worker_state() -> dict[str, Any]:
    """A dict that lives in this worker process for its lifetime (empty in a fresh or
    restarted one): objects kept between calls pinned to one worker (``worker=k``).
    ``WorkerPool.generation(k)`` tells the caller when it was lost."""
    return _STATE


def serve(
    conn,
    *,
    memory_mb: int | None,
    memory_limit: str = "rss",
    network: bool = True,
    concurrency: int,
    initializer: Callable[[], Any] | None,
) -> None:
    """Entry point of a worker process (``multiprocessing`` spawn target). ``initializer``
    runs before the worker says "ready" (imports that should not count against a call's
    deadline); if it raises, the traceback goes to stderr and the worker serves anyway.
    "ready" carries why the network (or the host's Unix sockets) could not be left
    (None: left, or not asked)."""
    ignore_group_signals()  # Ctrl-C and `timeout` signal the run's group: the driver
    # saves, then closes this worker (it must not die, nor print a KeyboardInterrupt)
    if os.getsid(0) != os.getpid():  # (already, when started in signals.own_session)
        os.setsid()  # a group of its own: the pool kills it with everything it started
    refused = None if network else enter_own_network()  # before any thread starts
    if not network and refused is None and (why := load_worker_filter()) is not None:
        refused = f"the host's Unix sockets stay reachable: {why}"  # (loaded before any
        # thread starts, as unshare: a thread started before would keep no filter)
    _die_with_parent()  # after unshare: a change of credentials may clear it
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    os.environ.update(dict.fromkeys(ONE_THREAD, "1"))  # read as torch or numpy loads
    if memory_mb is not None and memory_limit == "address_space":
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
            send(_run_call(call_id, payload, memory_mb=memory_mb, memory_limit=memory_limit))
        except MemoryError:
            os._exit(MEMORY_EXIT_CODE)
        except (BrokenPipeError, EOFError, OSError):
            os._exit(0)  # the parent is gone

    send(_dump(("ready", os.getpid(), refused)))
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="grouprl-call") as calls:
        while True:
            try:
                call_id, payload = pickle.loads(conn.recv_bytes())
            except (EOFError, OSError):  # the parent closed the pipe or died
                os._exit(0)
            calls.submit(run, call_id, payload)


def _run_call(call_id: int, payload: bytes, *, memory_mb: int | None, memory_limit: str) -> bytes:
    """The pickled reply to one call; the value is pickled here so that a value that
    cannot be pickled fails the call, not the worker."""
    try:
        fn, args, kwargs = pickle.loads(payload)
        value = fn(*args, **kwargs)
        if inspect.isawaitable(value):
            value = run_awaited(value)
        return _dump(("ok", call_id, _dump(value)))  # unpickled apart: a failure is this call's
    except MemoryError:
        limited = memory_mb is not None and memory_limit == "address_space"
        limit = f"address space limit {memory_mb} MB" if limited else "out of memory"
        return _dump(("err", call_id, "memory", "MemoryError", f"MemoryError: {limit}"))
    except BaseException as err:  # SystemExit too: it must not end the worker silently
        return _dump(("err", call_id, "error", type(err).__name__, _one_line(err)))


def run_awaited(awaitable: Awaitable[Any]) -> Any:
    """Await ``awaitable`` on this process's event loop and return its value; the
    calling thread blocks meanwhile. One loop for the process's life, so objects bound to
    a loop (an ``asyncio.Lock`` held at module level, an async HTTP client kept between
    calls) work from call to call; coroutines of concurrent calls share it."""
    loop = _event_loop()
    if threading.current_thread().name == _LOOP_THREAD:
        raise RuntimeError(
            "a coroutine was handed to run_awaited from code already running on the event "
            "loop, which would wait for itself: await it instead"
        )
    return asyncio.run_coroutine_threadsafe(_awaited(awaitable), loop).result()


_LOOP_THREAD = "grouprl-event-loop"
_LOOP: dict[int, asyncio.AbstractEventLoop] = {}
"""pid -> the loop running in its daemon thread (a forked child starts its own)."""
_LOOP_LOCK = threading.Lock()


def _event_loop() -> asyncio.AbstractEventLoop:
    with _LOOP_LOCK:
        loop = _LOOP.get(os.getpid())
        if loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name=_LOOP_THREAD, daemon=True).start()
            _LOOP.clear()
            _LOOP[os.getpid()] = loop
        return loop


def _dump(message: object) -> bytes:
    return pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    if len(text) > 300:
        text = text[:297] + "..."
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def _die_with_parent() -> None:
    """Linux: SIGKILL this process when the parent thread that started it ends."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if sys.platform.startswith("linux") and os.getppid() == 1:  # the parent died first
        os._exit(0)


def _prctl(option: int, value: int) -> None:
    """``prctl(option, value)`` on Linux; elsewhere nothing (there is no such call)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
