"""The contained worker pool: values, errors, and each way user code can misbehave (hang,
spin in C, exit, segfault, allocate without bound) fails one call, in time, and the pool
goes on with a fresh worker."""

from __future__ import annotations

import asyncio
import ctypes
import os
import re
import time

import pytest

from grouprl.config.containment import SandboxConfig
from grouprl.sandbox import CallFailed, WorkerPool, worker_state

pytestmark = pytest.mark.procs  # starts processes: make test-rest

DEADLINE_S = 1.0
MEMORY_MB = 512


# Functions the workers run: module-level, so they pickle by reference.


def add(a: int, b: int) -> int:
    return a + b


def pid() -> int:
    return os.getpid()


def raise_value_error() -> None:
    raise ValueError("bad input 7")


def sleep_forever() -> None:
    time.sleep(3600)


def regex_spin() -> object:
    return re.match(r"(a+)+$", "a" * 40 + "b")  # catastrophic backtracking, in C


def exit_3() -> None:
    os._exit(3)


def segfault() -> None:
    ctypes.string_at(0)


def allocate_forever() -> None:
    held = []
    while True:
        held.append(bytearray(100 * 1024 * 1024))


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def sleep_then_pid(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


async def async_add(a: int, b: int) -> int:
    await asyncio.sleep(0.01)
    return a + b


def remember(key: str, value: int) -> None:
    worker_state()[key] = value


def recall(key: str) -> int | None:
    return worker_state().get(key)


@pytest.fixture(scope="module")
def pool():
    with WorkerPool(SandboxConfig(workers=2, memory_mb=MEMORY_MB), name="test") as shared:
        shared.submit(add, 0, 0).result()  # workers started once for the module
        yield shared


def _fails(future, *, kind: str) -> tuple[CallFailed, float]:
    t0 = time.monotonic()
    with pytest.raises(CallFailed) as caught:
        future.result(timeout=DEADLINE_S + 5)
    assert caught.value.kind == kind, caught.value.message
    return caught.value, time.monotonic() - t0


def test_value_and_error_keep_the_worker(pool):
    assert pool.submit(add, 2, b=3).result() == 5
    before = [pool.generation(k) for k in range(2)]
    failure, _ = _fails(pool.submit(raise_value_error, worker=0), kind="error")
    assert failure.error_type == "ValueError"
    assert failure.message == "ValueError: bad input 7"
    assert [pool.generation(k) for k in range(2)] == before  # the worker lives on
    assert pool.submit(add, 1, 1, worker=0).result() == 2


def test_torch_runs_on_one_thread_in_a_worker(pool, monkeypatch):
    """The workers are the parallelism: a worker's torch takes one thread, whatever the
    run set for its own (``train.num_threads`` sets OMP_NUM_THREADS, which they inherit)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    with WorkerPool(SandboxConfig(workers=1), name="threads") as fresh:
        assert fresh.submit(torch_threads).result(timeout=60) == 1


def test_async_function_is_awaited(pool):
    assert pool.submit(async_add, 2, 3, deadline_s=DEADLINE_S).result() == 5


def test_hang_and_c_spin_time_out_and_are_replaced(pool):
    """Both at once, one per worker: each fails at its deadline, each worker is replaced."""
    before = [pool.generation(k) for k in range(2)]
    t0 = time.monotonic()
    hang = pool.submit(sleep_forever, deadline_s=DEADLINE_S, worker=0)
    spin = pool.submit(regex_spin, deadline_s=DEADLINE_S, worker=1)
    for future in (hang, spin):
        failure, _ = _fails(future, kind="timeout")
        assert failure.message == "killed after its 1s deadline"
    assert time.monotonic() - t0 < DEADLINE_S + 1
    assert pool.submit(add, 1, 2, worker=0).result() == 3
    assert pool.submit(add, 1, 2, worker=1).result() == 3
    assert [pool.generation(k) for k in range(2)] == [g + 1 for g in before]


@pytest.mark.parametrize(
    ("fn", "kind", "exit_code", "says"),
    [
        (exit_3, "crash", 3, "worker exited with code 3 (os._exit?)"),
        (segfault, "crash", -11, "worker killed by signal 11 (SIGSEGV)"),
    ],
    ids=["os_exit", "segfault"],
)
def test_a_crash_fails_the_call_and_replaces_the_worker(pool, fn, kind, exit_code, says):
    before = pool.generation(1)
    old_pid = pool.submit(pid, worker=1).result()
    # a deadline far off: touching 512 MB can take over a second on two busy cores
    failure, seconds = _fails(pool.submit(fn, deadline_s=30.0, worker=1), kind=kind)
    assert (failure.message, failure.exit_code) == (says, exit_code)
    assert seconds < 5
    assert pool.submit(add, 1, 2, worker=1).result() == 3
    assert pool.generation(1) == before + 1
    assert pool.submit(pid, worker=1).result() != old_pid
    assert not _alive(old_pid)


def test_pinned_state_lives_in_its_worker_until_a_restart(pool):
    pool.submit(remember, "episode", 41, worker=1).result()
    assert pool.submit(recall, "episode", worker=1).result() == 41
    assert pool.submit(recall, "episode", worker=0).result() is None
    generation = pool.generation(1)
    _fails(pool.submit(exit_3, worker=1), kind="crash")
    assert pool.generation(1) == generation + 1
    assert pool.submit(recall, "episode", worker=1).result() is None


def test_stats_count_each_kind(pool):
    before = pool.stats()
    _fails(pool.submit(raise_value_error), kind="error")
    _fails(pool.submit(exit_3), kind="crash")
    after = pool.stats()
    assert {k: after[k] - before[k] for k in after} == {
        "calls": 2,
        "timeouts": 0,
        "crashes": 1,
        "memory": 0,
        "errors": 1,
        "restarts": 1,
        "retried": 0,
    }


def test_the_address_space_limit_fails_an_unbounded_allocation_as_memory():
    """memory_limit="address_space": RLIMIT_AS, a MemoryError in the worker (the default,
    "rss", is tested in test_sandbox_contained.py)."""
    with WorkerPool(
        SandboxConfig(workers=1, memory_mb=MEMORY_MB, memory_limit="address_space")
    ) as pool:
        old_pid = pool.submit(pid).result()
        # a deadline far off: touching 512 MB can take over a second on two busy cores
        failure, seconds = _fails(pool.submit(allocate_forever, deadline_s=30.0), kind="memory")
        assert failure.message == f"MemoryError: address space limit {MEMORY_MB} MB"
        assert seconds < 5
        assert pool.submit(add, 1, 2).result() == 3
        assert pool.generation(0) == 2 and pool.submit(pid).result() != old_pid
        assert not _alive(old_pid)


def test_unpicklable_call_fails_as_error(pool):
    failure, _ = _fails(pool.submit(lambda: 1), kind="error")
    assert "cannot send the call to a worker" in failure.message


def test_concurrency_runs_calls_of_one_worker_at_once():
    with WorkerPool(SandboxConfig(workers=1, memory_mb=None), concurrency=2, name="conc") as pool:
        pool.submit(add, 0, 0).result()
        t0 = time.monotonic()
        futures = [pool.submit(sleep_then_pid, 0.3) for _ in range(2)]
        pids = {f.result() for f in futures}
        assert len(pids) == 1 and time.monotonic() - t0 < 0.55  # not 0.6: in turn


def test_close_kills_workers_and_fails_pending_calls():
    pool = WorkerPool(SandboxConfig(workers=2, memory_mb=MEMORY_MB), name="closing")
    pool.submit(add, 0, 0).result()
    pids = pool.pids()
    assert len(pids) == 2 and all(_alive(p) for p in pids)
    pending = pool.submit(sleep_forever)
    pool.close()
    pool.close()  # idempotent
    assert not any(_alive(p) for p in pids)
    failure, _ = _fails(pending, kind="crash")
    assert "closed" in failure.message
    with pytest.raises(RuntimeError, match="closed"):
        pool.submit(add, 1, 2)


def test_a_fault_of_the_manager_fails_every_call_instead_of_hanging(monkeypatch):
    """A bug or a /proc race in the manager thread fails the pending call and every later
    one at once (the run stops with the reason), never leaves a future nobody resolves."""
    pool = WorkerPool(SandboxConfig(workers=1, memory_mb=MEMORY_MB), name="faulty")
    pool.submit(add, 0, 0).result()
    pids = pool.pids()
    pending = pool.submit(sleep_then_pid, 0.3)

    def race(*args):
        raise FileNotFoundError("/proc/123/task")

    monkeypatch.setattr(pool, "_watch", race)
    pool._wake()
    with pytest.raises(RuntimeError, match=r"manager thread failed .FileNotFoundError"):
        pending.result(timeout=10)
    with pytest.raises(RuntimeError, match="takes no more calls"):
        pool.submit(add, 1, 2).result(timeout=1)
    pool.close()
    assert not any(_alive(p) for p in pids)


def _alive(process_id: int) -> bool:
    try:
        os.kill(process_id, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_spare_worker_replaces_the_next_one_to_go():
    """After the first replacement the pool keeps one worker started ahead: the next
    replacement is that process, not a cold start."""
    with WorkerPool(SandboxConfig(workers=1, memory_mb=MEMORY_MB), name="spare") as pool:
        _fails(pool.submit(exit_3), kind="crash")
        worker = pool.submit(pid).result()
        [spare] = [p for p in pool.pids() if p != worker]
        _fails(pool.submit(exit_3), kind="crash")
        assert pool.submit(pid).result() == spare
        assert pool.stats()["restarts"] == 2 and pool.generation(0) == 3
