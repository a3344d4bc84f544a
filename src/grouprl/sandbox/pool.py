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

import pickle
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future

from grouprl.sandbox.failures import CallFailed
from grouprl.sandbox.manager import Manager
from grouprl.sandbox.slots import Call, Resolved, resolve


class WorkerPool(Manager):
    """``sandbox.workers`` worker processes, each running up to ``concurrency`` calls at
    once in threads, each limited to ``sandbox.memory_mb`` MB (None: no limit) measured as
    ``sandbox.memory_limit`` says: "rss", the resident memory of the worker's process tree,
    read by the manager thread while the worker has calls in flight (killed past it), or
    "address_space", ``RLIMIT_AS`` on each process (a MemoryError past it). ``network``
    False: each worker in its own user+network namespace where the kernel allows it
    (``network_refused`` says why not). Workers start on the first ``submit``;
    ``close()`` (or leaving a ``with`` block, or interpreter exit) kills them with their
    process trees. ``initializer`` (picklable) runs in each worker as it starts, before
    any call (outside the calls' deadlines). ``sandbox.timeout_s`` is the caller's to pass
    as ``deadline_s``. (The constructor and ``close``: ``Manager``, manager.py.)"""

    def submit(
        self,
        fn: Callable[..., object],
        /,
        *args: object,
        deadline_s: float | None = None,
        worker: int | None = None,
        alone: bool = False,
        retry_lost: bool = False,
        **kwargs: object,
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
            call = Call(payload=b"", deadline_s=deadline_s, pinned=worker)
            call.future.set_exception(
                CallFailed(
                    "error",
                    f"cannot send the call to a worker: {type(err).__name__}: {err}. Pass a "
                    "module-level function of an importable module, and picklable arguments",
                    error_type=type(err).__name__,
                )
            )
            return call.future
        call = Call(
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
        resolve(resolved)
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

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
