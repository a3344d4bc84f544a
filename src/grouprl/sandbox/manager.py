"""The manager thread of a ``WorkerPool`` (the picture: pool.py): it alone starts, feeds,
reads, watches and kills the workers, with the pool's lock held; the caller's side
(``submit``, ``abandon``, ``close``) only queues calls and wakes it through a pipe."""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import logging
import multiprocessing
import multiprocessing.connection
import os
import pickle
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING

from grouprl.host.sessions import blocked_signals
from grouprl.host.tree import kill_tree, usage
from grouprl.sandbox.failures import CallFailed, FailureKind, death
from grouprl.sandbox.main_guard import UNGUARDED_EXIT_CODE, WORKER_NAME_PREFIX, worker_start_error
from grouprl.sandbox.slots import STAT_OF, Call, Resolved, Slot, resolve
from grouprl.sandbox.worker import serve

if TYPE_CHECKING:
    from grouprl.config.containment import SandboxConfig

logger = logging.getLogger(__name__)

BOOT_FAILURES_LIMIT = 3
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


class Manager:
    """The state of a pool's workers and calls, and the thread that keeps it; every method
    but ``_wake`` runs with ``_lock`` held (or before the thread starts)."""

    def __init__(
        self,
        sandbox: SandboxConfig,
        *,
        name: str = "pool",
        network: bool = True,
        concurrency: int = 1,
        initializer: Callable[[], object] | None = None,
    ) -> None:
        if sandbox.workers < 1 or concurrency < 1:
            raise ValueError(
                f"WorkerPool: workers={sandbox.workers}, concurrency={concurrency}; both >= 1"
            )
        self.size, self.concurrency, self.name = sandbox.workers, concurrency, name
        self.memory_mb, self.memory_limit = sandbox.memory_mb, sandbox.memory_limit
        self.initializer, self.network = initializer, network
        self.network_refused: str | None = None
        """Why a worker kept the network though ``network=False`` (None: none did)."""
        self._watch_rss = self.memory_mb is not None and self.memory_limit == "rss"
        self._sample_at = 0.0
        self._ctx = multiprocessing.get_context("spawn")
        self._lock = threading.Lock()
        self._slots = [Slot(k) for k in range(self.size)]
        self._queue: deque[Call] = deque()
        self._pinned: list[deque[Call]] = [deque() for _ in range(self.size)]
        self._stats: dict[str, int] = dict.fromkeys(
            ("calls", "timeouts", "crashes", "memory", "errors", "restarts", "retried"), 0
        )
        self._boot_failures = 0
        self._fatal: Exception | None = None  # every call fails with it (main_guard)
        self._spare: Slot | None = None  # a started worker that replaces the next to go
        self._keep_spare = False  # from the first replacement on
        self._closed = False
        self._thread: threading.Thread | None = None
        self._wake_r, self._wake_w = os.pipe()
        for fd in (self._wake_r, self._wake_w):
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
        _LIVE.add(self)

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

    def _manage(self) -> None:
        resolved: Resolved = []
        try:
            while True:
                resolved = []
                with self._lock:
                    if self._closed:
                        break
                    self._start_wanted()
                    self._dispatch()
                    waitables, timeout = self._waitables()
                resolve(resolved)
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
                resolve(resolved)
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
            resolve(resolved)
        finally:
            self._shutdown()

    def _waitables(self) -> tuple[list[Connection | int], float]:
        waitables: list[Connection | int] = [self._wake_r]
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

    def _every_slot(self) -> list[Slot]:
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
            self._spare = self._spare or Slot(self.size)
            if self._spare.process is None:
                self._start(self._spare)

    def _adopt_spare(self, slot: Slot) -> None:
        spare = self._spare
        assert spare is not None, "called only when a spare is started"
        slot.process, slot.conn, slot.ready = spare.process, spare.conn, spare.ready
        slot.started_at = spare.started_at
        slot.restart_wanted = False
        slot.generation += 1
        spare.reset()

    def _start(self, slot: Slot) -> None:
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

    def _dispatch(self) -> None:
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

    def _takes_calls(self, slot: Slot) -> bool:
        return (
            slot.ready
            and not (slot.retiring or slot.abandoned)
            and len(slot.inflight) < self.concurrency
            and not any(call.alone for call in slot.inflight.values())
        )

    def _receive(self, slot: Slot, resolved: Resolved) -> None:
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

    def _on_exit(self, slot: Slot, resolved: Resolved) -> None:
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
        self._drain(error, resolved)

    def _boot_failed(self, slot: Slot, text: str, code: int | None, resolved: Resolved) -> None:
        """Worker ``slot`` died or hung before it was ready: after a few in a row, fail the
        queued calls rather than start workers forever."""
        if slot.process is not None:
            self._discard(slot)
        self._boot_failures += 1
        if self._boot_failures >= BOOT_FAILURES_LIMIT:
            self._boot_failures = 0
            failure = CallFailed(
                "crash",
                f"pool {self.name!r}: {BOOT_FAILURES_LIMIT} workers in a row failed to start "
                f"({text}); see the worker's error above",
                exit_code=code,
            )
            self._stats["crashes"] += self._drain(failure, resolved)

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
        slot: Slot,
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

    def _discard(self, slot: Slot) -> None:
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
        self, call: Call, failure: CallFailed, resolved: Resolved, *, started: bool = True
    ) -> None:
        if not started and not call.claim():
            return
        self._stats[STAT_OF[failure.kind]] += 1
        resolved.append((call.future, None, failure))

    def _drain(self, error: Exception, resolved: Resolved) -> int:
        """Fail every queued call with ``error`` (those the caller did not cancel); how many."""
        before = len(resolved)
        for queue in (self._queue, *self._pinned):
            while queue:
                call = queue.popleft()
                if call.claim():
                    resolved.append((call.future, None, error))
        return len(resolved) - before

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
            self._drain(closed, resolved)
            self._close_wake()
        resolve(resolved)


_LIVE: weakref.WeakSet[Manager] = weakref.WeakSet()


@atexit.register  # after multiprocessing.util's hook (imported above): run before it
def _close_all() -> None:
    """Close pools still open at interpreter exit (before multiprocessing joins children)."""
    for pool in list(_LIVE):
        pool.close()
