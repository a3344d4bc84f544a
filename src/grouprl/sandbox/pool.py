"""A pool of worker processes that run user code (rewards, environment steps, agents)
with a hard deadline per call, a memory limit per worker and, when asked, no network.

::

    submit(fn, ...) ──► queue (shared, or worker k's own when pinned)
                          │  one manager thread: dispatch to a ready worker with a free slot
                          │  (an `alone` call: to a worker with nothing else in flight)
                          ▼
             worker k (spawned; own process group; subreaper) ──► reply ──► future
                          │ past deadline: the call fails at once; the worker's whole
                          │ process tree is killed (when its other calls are done)
                          │ past memory_mb resident (sampled ~10x a second while busy), or
                          │ dead (exit, signal): its in-flight calls fail "memory"/"crash",
                          │ own=False when several were in flight; those sent with
                          │ `retry_lost` run again once, alone, on another worker
                          │ abandon(futures): they fail "timeout", their workers are killed
                          │ re-ran a script that trains (main_guard): every call, now and
                          │ later, fails UnguardedMainError; no worker is started again
                          ▼
             restarted worker (generation k + 1, empty worker_state())

Workers are started with the "spawn" context, never fork: the driver holds torch, vLLM
and Ray threads. Only the manager thread starts workers, since a worker is killed when
the thread that started it ends (``PR_SET_PDEATHSIG``). A worker is killed with its
process tree (``tree.kill_tree``): every process it started, in any process group, and
any orphan of theirs, which the worker adopts as a child subreaper. Futures are resolved
outside the lock, so a done-callback may submit again.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import itertools
import logging
import multiprocessing
import multiprocessing.connection
import multiprocessing.util  # its atexit hook joins children: ours must be registered after
import os
import pickle
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any

from grouprl.host.sessions import blocked_signals
from grouprl.host.tree import kill_tree, usage
from grouprl.sandbox.failures import CallFailed, FailureKind, death
from grouprl.sandbox.main_guard import UNGUARDED_EXIT_CODE, WORKER_NAME_PREFIX, worker_start_error
from grouprl.sandbox.worker import serve

logger = logging.getLogger(__name__)

_BOOT_FAILURES_LIMIT = 3
"""Workers in a row that die before they are ready: then queued calls fail, not loop."""

BOOT_TIMEOUT_S = 60.0
"""A worker not ready this long after its start is killed (a start takes ~0.1 s; a script
that trains without ``if __name__ == "__main__":`` would train again in each worker)."""

RSS_SAMPLE_S = 0.1
"""How often each busy worker's process tree is read: its resident memory (``rss``) and
its processes (``MAX_PROCESSES``)."""

MAX_PROCESSES = 256
"""Processes in one worker's tree at most (the worker and what its calls started); past
it the tree is killed and its calls fail as a crash. A sample, not a kernel limit: a fast
fork bomb can pass it between two reads (RLIMIT_NPROC counts every process of the user,
and root ignores it), but it is frozen and killed whole at the next."""

MEMORY_LIMITS = ("rss", "address_space")


class _Call:
    def __init__(
        self,
        *,
        payload: bytes,
        deadline_s: float | None,
        pinned: int | None,
        alone: bool = False,
        retry_lost: bool = False,
    ) -> None:
        self.id = next(_CALL_IDS)
        self.payload = payload
        self.future: Future = Future()
        self.deadline_s = deadline_s
        self.pinned = pinned
        self.alone = alone
        self.retry_lost = retry_lost and pinned is None
        self.deadline_at = float("inf")

    def claim(self) -> bool:
        """Mark the future running (a call queued again after a lost worker already is);
        False when the caller cancelled it."""
        return self.future.running() or self.future.set_running_or_notify_cancel()


_CALL_IDS = itertools.count()


class _Slot:
    """Worker ``index``: its current process (None between processes) and calls."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.generation = 0
        self.restart_wanted = False
        self.reset()

    def reset(self) -> None:
        self.process: Any = None
        self.conn: Any = None
        self.ready = False
        self.started_at = 0.0
        self.retiring = False  # a call timed out or ran out of memory: replace when idle
        self.abandoned = False  # abandon() failed a call it runs: kill it now
        self.inflight: dict[int, _Call] = {}


Resolved = list[tuple[Future, Any, BaseException | None]]


class WorkerPool:
    """``size`` worker processes, each running up to ``concurrency`` calls at once in
    threads, each limited to ``memory_mb`` MB (None: no limit) measured as
    ``memory_limit`` says: "rss", the resident memory of the worker's process tree, read
    by the manager thread while the worker has calls in flight (killed past it), or
    "address_space", ``RLIMIT_AS`` on each process (a MemoryError past it). ``network``
    False: each worker in its own user+network namespace where the kernel allows it
    (``network_refused`` says why not). Workers start on the first ``submit``;
    ``close()`` (or leaving a ``with`` block, or interpreter exit) kills them with their
    process trees. ``initializer`` (picklable) runs in each worker as it starts, before
    any call (outside the calls' deadlines)."""

    def __init__(
        self,
        size: int = 2,
        memory_mb: int | None = 4096,
        concurrency: int = 1,
        name: str = "pool",
        initializer: Callable[[], Any] | None = None,
        memory_limit: str = "rss",
        network: bool = True,
    ) -> None:
        if size < 1 or concurrency < 1:
            raise ValueError(f"WorkerPool: size={size}, concurrency={concurrency}; both >= 1")
        if memory_mb is not None and memory_mb < 64:
            raise ValueError(f"WorkerPool: memory_mb={memory_mb}; at least 64, or None")
        if memory_limit not in MEMORY_LIMITS:
            raise ValueError(
                f"WorkerPool: memory_limit={memory_limit!r}; one of {list(MEMORY_LIMITS)}"
            )
        self.size, self.memory_mb, self.concurrency, self.name = size, memory_mb, concurrency, name
        self.initializer = initializer
        self.memory_limit, self.network = memory_limit, network
        self.network_refused: str | None = None
        """Why a worker kept the network though ``network=False`` (None: none did)."""
        self._watch_rss = memory_mb is not None and memory_limit == "rss"
        self._sample_at = 0.0
        self._ctx = multiprocessing.get_context("spawn")
        self._lock = threading.Lock()
        self._slots = [_Slot(k) for k in range(size)]
        self._queue: deque[_Call] = deque()
        self._pinned: list[deque[_Call]] = [deque() for _ in range(size)]
        self._stats: dict[str, int] = dict.fromkeys(
            ("calls", "timeouts", "crashes", "memory", "errors", "restarts", "retried"), 0
        )
        self._boot_failures = 0
        self._fatal: Exception | None = None  # every call fails with it (main_guard)
        self._spare: _Slot | None = None  # a started worker that replaces the next to go
        self._keep_spare = False  # from the first replacement on
        self._closed = False
        self._thread: threading.Thread | None = None
        self._wake_r, self._wake_w = os.pipe()
        for fd in (self._wake_r, self._wake_w):
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
        _LIVE.add(self)

    # -- the caller's side --------------------------------------------------------------

    def submit(
        self,
        fn: Callable[..., Any],
        /,
        *args: Any,
        deadline_s: float | None = None,
        worker: int | None = None,
        alone: bool = False,
        retry_lost: bool = False,
        **kwargs: Any,
    ) -> Future:
        """Run ``fn(*args, **kwargs)`` in a worker; the future holds its value or raises
        ``CallFailed``. ``deadline_s`` counts from when the call starts in a worker.
        ``worker=k`` pins the call to worker k (see ``worker_state``). ``alone``: no other
        call is in flight on its worker while it runs. ``retry_lost`` (unpinned calls
        only; a pinned call is never retried): when its worker dies with other calls in
        flight (a crash, killed for memory), run it again once, alone, on a fresh worker;
        its future fails only when that fails too."""
        if worker is not None and not 0 <= worker < self.size:
            raise ValueError(f"WorkerPool.submit: worker={worker}; 0 <= worker < {self.size}")
        try:
            payload = pickle.dumps((fn, args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as err:
            call = _Call(payload=b"", deadline_s=deadline_s, pinned=worker)
            call.future.set_exception(
                CallFailed(
                    "error",
                    f"cannot send the call to a worker: {type(err).__name__}: {err}. Pass a "
                    "module-level function of an importable module, and picklable arguments",
                    error_type=type(err).__name__,
                )
            )
            return call.future
        call = _Call(
            payload=payload,
            deadline_s=deadline_s,
            pinned=worker,
            alone=alone,
            retry_lost=retry_lost,
        )
        with self._lock:
            if self._closed:
                raise RuntimeError(f"WorkerPool {self.name!r} is closed")
            self._stats["calls"] += 1
            if self._fatal is not None:
                call.future.set_exception(self._fatal)
                return call.future
            (self._queue if worker is None else self._pinned[worker]).append(call)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._manage, name=f"grouprl-pool-{self.name}", daemon=True
                )
                self._thread.start()
        self._wake()
        return call.future

    def abandon(
        self, futures: Iterable[Future], *, message: str = "abandoned before it finished"
    ) -> int:
        """Fail each of ``futures`` not done yet with ``CallFailed("timeout", message)``:
        queued ones are dropped, workers running one are killed with their process trees
        (their other calls fail as lost, ``own=False``, or run again if ``retry_lost``) and
        replaced. Returns how many it failed."""
        wanted = {id(f) for f in futures if not f.done()}
        failure = CallFailed("timeout", message)
        resolved: Resolved = []
        with self._lock:
            for queue in (self._queue, *self._pinned):
                dropped = [c for c in queue if id(c.future) in wanted]
                if dropped:
                    kept = [c for c in queue if id(c.future) not in wanted]
                    queue.clear()
                    queue.extend(kept)
                for call in dropped:
                    self._fail(call, failure, resolved, started=False)
            for slot in self._slots:
                for call in [c for c in slot.inflight.values() if id(c.future) in wanted]:
                    del slot.inflight[call.id]
                    self._fail(call, failure, resolved)
                    slot.abandoned = True
        _resolve(resolved)
        self._wake()
        return len(resolved)

    def generation(self, k: int) -> int:
        """How many times worker ``k`` has been started (0: not yet); a change means its
        ``worker_state()`` was lost."""
        with self._lock:
            return self._slots[k].generation

    def stats(self) -> dict[str, int]:
        """Counts so far: calls submitted, calls failed by kind, workers restarted."""
        with self._lock:
            return dict(self._stats)

    def pids(self) -> list[int]:
        """The process ids of the workers now running."""
        with self._lock:
            return [s.process.pid for s in self._every_slot() if s.process is not None]

    def close(self) -> None:
        """Kill the workers and fail the calls not done; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
        if thread is None:
            self._close_wake()
            return
        self._wake()
        if thread is not threading.current_thread():
            thread.join()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _wake(self) -> None:
        with self._lock, contextlib.suppress(BlockingIOError, OSError):  # full: one is pending
            if self._wake_w >= 0:
                os.write(self._wake_w, b"x")

    def _close_wake(self) -> None:
        """Close the wake-up pipe (with the lock held, or before the manager started)."""
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._wake_r = self._wake_w = -1

    # -- the manager thread -------------------------------------------------------------

    def _manage(self) -> None:
        resolved: Resolved = []
        try:
            while True:
                resolved = []
                with self._lock:
                    if self._closed:
                        break
                    self._start_wanted()
                    self._dispatch(resolved)
                    waitables, timeout = self._waitables()
                _resolve(resolved)
                ready = set(multiprocessing.connection.wait(waitables, timeout))
                resolved = []
                with self._lock:
                    with contextlib.suppress(BlockingIOError, OSError):
                        os.read(self._wake_r, 4096)
                    for slot in self._every_slot():
                        if slot.conn is not None and slot.conn in ready:
                            self._receive(slot, resolved)
                        if slot.process is not None and slot.process.sentinel in ready:
                            self._on_exit(slot, resolved)
                    now = time.monotonic()
                    self._expire(now, resolved)
                    self._watch(now, resolved)
                    self._retire(resolved)
                _resolve(resolved)
        except BaseException as err:
            # a fault of the manager itself (a bug, a /proc race): every call fails with it,
            # the pending ones now and later ones at submit, rather than wait on a thread
            # that is gone; the outcomes it had already reached are delivered
            with self._lock:
                self._fatal = RuntimeError(
                    f"WorkerPool {self.name!r}: its manager thread failed "
                    f"({type(err).__name__}: {err}); the pool takes no more calls"
                )
            logger.exception(self._fatal)
            _resolve(resolved)
        finally:
            self._shutdown()

    def _waitables(self) -> tuple[list[Any], float]:
        waitables: list[Any] = [self._wake_r]
        deadline = float("inf")
        for slot in self._every_slot():
            if slot.process is not None:
                waitables += [slot.conn, slot.process.sentinel]
            if slot.process is not None and not slot.ready:
                deadline = min(deadline, slot.started_at + BOOT_TIMEOUT_S)
            for call in slot.inflight.values():
                deadline = min(deadline, call.deadline_at)
            if slot.inflight and slot is not self._spare:
                deadline = min(deadline, self._sample_at)
        return waitables, min(max(deadline - time.monotonic(), 0.0), 1.0)

    def _every_slot(self) -> list[_Slot]:
        return [*self._slots, self._spare] if self._spare is not None else self._slots

    def _start_wanted(self) -> None:
        """Start (or hand the spare to) each worker slot that has work or lost its worker;
        after the first replacement, keep a spare started: the next one is then ready."""
        if self._fatal is not None:
            return
        for slot in self._slots:
            if slot.process is None and (
                slot.restart_wanted or self._queue or self._pinned[slot.index]
            ):
                if self._spare is not None and self._spare.process is not None:
                    self._adopt_spare(slot)
                else:
                    self._start(slot)
        if self._keep_spare:
            self._spare = self._spare or _Slot(self.size)
            if self._spare.process is None:
                self._start(self._spare)

    def _adopt_spare(self, slot: _Slot) -> None:
        spare = self._spare
        assert spare is not None, "called only when a spare is started"
        slot.process, slot.conn, slot.ready = spare.process, spare.conn, spare.ready
        slot.started_at = spare.started_at
        slot.restart_wanted = False
        slot.generation += 1
        spare.reset()

    def _start(self, slot: _Slot) -> None:
        parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        process = self._ctx.Process(
            target=serve,
            args=(child_conn,),
            kwargs={
                "memory_mb": self.memory_mb,
                "memory_limit": self.memory_limit,
                "network": self.network,
                "concurrency": self.concurrency,
                "initializer": self.initializer,
            },
            name=f"{WORKER_NAME_PREFIX}{self.name}-{slot.index}",
            daemon=False,  # a daemonic worker could not start processes of its own
        )
        with blocked_signals():  # until it ignores them: a Ctrl-C to the group misses it
            process.start()
        child_conn.close()
        slot.process, slot.conn = process, parent_conn
        slot.started_at = time.monotonic()
        slot.restart_wanted = False
        slot.generation += 1

    def _dispatch(self, resolved: Resolved) -> None:
        progress = True
        while progress:
            progress = False
            for slot in self._slots:
                if not self._takes_calls(slot):
                    continue
                own = self._pinned[slot.index]
                queue = own if own else self._queue
                if not queue or (queue[0].alone and slot.inflight):
                    continue  # an alone call waits for an idle worker, and the rest behind it
                call = queue.popleft()
                progress = True
                if not call.claim():
                    continue
                if call.deadline_s is not None:
                    call.deadline_at = time.monotonic() + call.deadline_s
                slot.inflight[call.id] = call
                with contextlib.suppress(OSError):  # a dead worker: its sentinel says so
                    slot.conn.send_bytes(pickle.dumps((call.id, call.payload)))

    def _takes_calls(self, slot: _Slot) -> bool:
        return (
            slot.ready
            and not (slot.retiring or slot.abandoned)
            and len(slot.inflight) < self.concurrency
            and not any(call.alone for call in slot.inflight.values())
        )

    def _receive(self, slot: _Slot, resolved: Resolved) -> None:
        while True:
            try:
                if not slot.conn.poll():
                    return
                message = pickle.loads(slot.conn.recv_bytes())
            except (EOFError, OSError):
                return  # the worker died: its sentinel fires
            tag = message[0]
            if tag == "ready":
                slot.ready = True
                self._boot_failures = 0
                self._note_network(message[2])
                continue
            call = slot.inflight.pop(message[1], None)
            if call is None:  # it timed out already
                continue
            if tag == "ok":
                try:
                    resolved.append((call.future, pickle.loads(message[2]), None))
                except Exception as err:
                    failure = CallFailed(
                        "error",
                        f"the value cannot be unpickled here: {type(err).__name__}: {err}",
                        error_type=type(err).__name__,
                    )
                    self._fail(call, failure, resolved)
                continue
            _, _, kind, error_type, text = message
            if kind == "memory":
                slot.retiring = True  # what it allocated may still be held by globals
            self._fail(call, CallFailed(kind, text, error_type=error_type), resolved)

    def _note_network(self, refused: str | None) -> None:
        if refused is not None and self.network_refused is None:
            self.network_refused = refused
            logger.warning(f"pool {self.name!r}: network=False, but its workers keep it: {refused}")

    def _on_exit(self, slot: _Slot, resolved: Resolved) -> None:
        self._receive(slot, resolved)  # replies sent before it died
        kill_tree(slot.process.pid)  # its group outlives it; not reaped yet, the id is safe
        slot.process.join(1.0)
        code = slot.process.exitcode
        was_ready = slot.ready
        kind, text = death(code, memory_mb=self.memory_mb, memory_limit=self.memory_limit)
        if was_ready:
            self._lose(slot, kind, text, resolved, exit_code=code)
            return
        self._discard(slot)
        if code == UNGUARDED_EXIT_CODE:
            self._fail_every_call(worker_start_error(self.name), resolved)
            return
        self._boot_failed(slot, text, code, resolved)

    def _fail_every_call(self, error: Exception, resolved: Resolved) -> None:
        """A worker re-ran a script that starts a run (``main_guard``): no worker of this
        pool can start, so fail the queued calls, and every later one, with ``error``
        (not a ``CallFailed``: the caller stops rather than score the call 0)."""
        self._fatal = error
        for queue in (self._queue, *self._pinned):
            while queue:
                call = queue.popleft()
                if call.claim():
                    resolved.append((call.future, None, error))

    def _boot_failed(self, slot: _Slot, text: str, code: int | None, resolved: Resolved) -> None:
        """Worker ``slot`` died or hung before it was ready: after a few in a row, fail the
        queued calls rather than start workers forever."""
        if slot.process is not None:
            self._discard(slot)
        self._boot_failures += 1
        if self._boot_failures >= _BOOT_FAILURES_LIMIT:
            self._boot_failures = 0
            failure = CallFailed(
                "crash",
                f"pool {self.name!r}: {_BOOT_FAILURES_LIMIT} workers in a row failed to start "
                f"({text}); see the worker's error above",
                exit_code=code,
            )
            for queue in (self._queue, *self._pinned):
                while queue:
                    self._fail(queue.popleft(), failure, resolved, started=False)

    def _expire(self, now: float, resolved: Resolved) -> None:
        for slot in self._every_slot():
            if slot.process is not None and not slot.ready:
                if now - slot.started_at > BOOT_TIMEOUT_S:
                    self._boot_failed(
                        slot,
                        f"worker not ready {BOOT_TIMEOUT_S:g}s after its "
                        "start (a script that starts training must do so under "
                        '`if __name__ == "__main__":`: workers import it)',
                        None,
                        resolved,
                    )
                continue
            for call in [c for c in slot.inflight.values() if c.deadline_at <= now]:
                del slot.inflight[call.id]
                failure = CallFailed("timeout", f"killed after its {call.deadline_s:g}s deadline")
                self._fail(call, failure, resolved)
                slot.retiring = True

    def _watch(self, now: float, resolved: Resolved) -> None:
        """Kill each busy worker whose process tree is resident past ``memory_mb``
        (``rss``) or holds more than ``MAX_PROCESSES`` processes."""
        if now < self._sample_at:
            return
        self._sample_at = now + RSS_SAMPLE_S
        for slot in self._slots:
            if slot.process is None or not slot.inflight:
                continue
            rss, processes = usage(slot.process.pid)
            if processes > MAX_PROCESSES:
                text = (
                    f"worker killed with {processes} processes in its tree, more than "
                    f"{MAX_PROCESSES} (a fork without bound?)"
                )
                self._lose(slot, "crash", text, resolved)
            elif self._watch_rss and self.memory_mb is not None and rss > self.memory_mb:
                text = (
                    f"worker killed at {rss:.0f} MB resident (its process tree), over its "
                    f"memory limit of {self.memory_mb} MB (memory_limit=rss)"
                )
                self._lose(slot, "memory", text, resolved)

    def _retire(self, resolved: Resolved) -> None:
        """Replace workers marked to go: at once when ``abandon`` failed a call of theirs
        (the rest are lost), when idle when a call timed out or ran out of memory."""
        for slot in self._slots:
            if slot.process is None:
                continue
            if slot.abandoned:
                text = "its worker was killed to stop a call abandoned beside it"
                self._lose(slot, "crash", text, resolved, own=False)
            elif slot.retiring and not slot.inflight:
                self._discard(slot)
                slot.restart_wanted = not self._closed

    def _lose(
        self,
        slot: _Slot,
        kind: FailureKind,
        text: str,
        resolved: Resolved,
        *,
        exit_code: int | None = None,
        own: bool | None = None,
    ) -> None:
        """Worker ``slot`` died or must go: kill and replace it; its calls in flight fail
        with ``kind`` (``own`` unless others were in flight beside them), but those sent
        with ``retry_lost`` that are not surely its cause are queued again, once, alone."""
        calls = list(slot.inflight.values())
        own = len(calls) == 1 if own is None else own
        slot.inflight.clear()
        self._discard(slot)
        slot.restart_wanted = not self._closed
        for call in reversed(calls):  # to the queue's front, in their order
            if call.retry_lost and not own and not self._closed:
                call.retry_lost, call.alone = False, True
                call.deadline_at = float("inf")
                self._queue.appendleft(call)
                self._stats["retried"] += 1
            else:
                self._fail(call, CallFailed(kind, text, exit_code=exit_code, own=own), resolved)

    def _discard(self, slot: _Slot) -> None:
        """Kill slot's process with its whole tree if it runs, reap it and close its pipe;
        counted as a restart unless the pool is closing (before the failed calls are resolved, so a
        caller sees the count include its failure)."""
        if not self._closed and slot is not self._spare:
            self._stats["restarts"] += 1
            self._keep_spare = True
        process = slot.process
        if process.exitcode is None:  # (exitcode reaps a worker that just died)
            kill_tree(process.pid)
            process.join(5.0)
        slot.conn.close()
        with contextlib.suppress(ValueError):  # still running after SIGKILL: leave it
            process.close()
        slot.reset()

    def _fail(
        self, call: _Call, failure: CallFailed, resolved: Resolved, *, started: bool = True
    ) -> None:
        if not started and not call.claim():
            return
        self._stats[_STAT_OF[failure.kind]] += 1
        resolved.append((call.future, None, failure))

    def _shutdown(self) -> None:
        resolved: Resolved = []
        closed = self._fatal or CallFailed(
            "crash", f"pool {self.name!r} was closed before the call finished"
        )
        with self._lock:
            for slot in self._every_slot():
                for call in slot.inflight.values():
                    resolved.append((call.future, None, closed))
                if slot.process is not None:
                    self._discard(slot)
            for queue in (self._queue, *self._pinned):
                while queue:
                    call = queue.popleft()
                    if call.claim():
                        resolved.append((call.future, None, closed))
            self._close_wake()
        _resolve(resolved)


_STAT_OF = {"timeout": "timeouts", "crash": "crashes", "memory": "memory", "error": "errors"}


def _resolve(resolved: Resolved) -> None:
    for future, value, error in resolved:
        if future.done():
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)


_LIVE: weakref.WeakSet[WorkerPool] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    """Close pools still open at interpreter exit (before multiprocessing joins children)."""
    for pool in list(_LIVE):
        pool.close()
