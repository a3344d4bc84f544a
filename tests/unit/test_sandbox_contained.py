"""What the worker pool contains beyond one call's value: the processes a call starts
(killed with their worker, however they hide), resident memory (threads are free, an
allocation past the limit is killed), the network (off when asked), one worker's death
(its other calls are not blamed, and run again when asked), abandoned calls, and one event
loop per process for async code."""

from __future__ import annotations

import asyncio
import ctypes
import errno
import http.server
import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from grouprl.config.containment import SandboxConfig
from grouprl.host.namespaces import host_socket_isolation, network_isolation, refusal
from grouprl.host.tree import _wait_stopped, kill_tree, running
from grouprl.sandbox import CallFailed, WorkerPool, worker_state

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc, prctl")

MEMORY_MB = 256

# A grandchild that leaves the tree as far as it can: a session of its own, its parent
# gone (it is reparented to the worker, a child subreaper, instead of init).
_ORPHAN = (
    "import os, time\n"
    "if os.fork():\n"
    "    os._exit(0)\n"
    "os.setsid()\n"
    "os.write(1, str(os.getpid()).encode())\n"
    "os.close(1)\n"
    "time.sleep(300)\n"
)


# Functions the workers run: module-level, so they pickle by reference.


def start_children() -> list[int]:
    """A worker's own pid, then three descendants: a child in its group, a child in a
    session of its own, and an orphaned grandchild in a session of its own."""
    plain = subprocess.Popen(["sleep", "300"])
    own_session = subprocess.Popen(["sleep", "300"], start_new_session=True)
    orphan = subprocess.run(  # (stdout only: the grandchild keeps stderr open)
        [sys.executable, "-I", "-S", "-c", _ORPHAN], stdout=subprocess.PIPE, text=True, check=True
    )
    return [os.getpid(), plain.pid, own_session.pid, int(orphan.stdout)]


def clone_parent_children_then_hang(path: str) -> None:
    """Two children made with clone(CLONE_PARENT | SIGCHLD), so the pool's children, not
    this worker's: one left in the worker's process group, one in a group of its own
    (still in the worker's session)."""
    libc = ctypes.CDLL(None, use_errno=True)
    number = {"x86_64": 56, "aarch64": 220}[os.uname().machine]
    pids = []
    for own_group in (False, True):
        child = libc.syscall(number, 0x8000 | signal.SIGCHLD, 0, 0, 0, 0)
        if child == 0:
            try:  # (a copy of this worker thread: it must never return)
                if own_group:
                    os.setpgid(0, 0)
                os.execv("/bin/sleep", ["sleep", "300"])
            finally:
                os._exit(127)
        assert child > 0, ctypes.get_errno()
        pids.append(child)
    Path(path).write_text(" ".join(map(str, pids)))
    time.sleep(3600)


def start_children_then_hang(path: str) -> None:
    Path(path).write_text(" ".join(map(str, start_children())))
    time.sleep(3600)


def pid() -> int:
    return os.getpid()


def fork_then_hang(path: str, children: int) -> None:
    """Start ``children`` sleeping children (a bounded stand-in for a fork bomb)."""
    with open(path, "a") as pids:  # each pid as it starts: the tree may die at any fork
        for _ in range(children):
            pids.write(f"{subprocess.Popen(['sleep', '300']).pid} ")
            pids.flush()
            time.sleep(0.02)
    time.sleep(3600)


def start_threads(n: int) -> int:
    release = threading.Event()
    threads = [threading.Thread(target=release.wait) for _ in range(n)]
    for thread in threads:
        thread.start()
    release.set()
    for thread in threads:
        thread.join()
    return n


def allocate_slowly(limit_mb: int) -> int:
    """Touch 16 MB at a time up to 4x ``limit_mb`` (1.6 GB/s at most: the watchdog reads
    the worker a few times before it gets there)."""
    held = []
    while len(held) * 16 < 4 * limit_mb:
        held.append(bytearray(16 * 2**20))
        time.sleep(0.01)
    return len(held)


def connect(port: int) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=2):
        return os.getuid()


def count_alone(seconds: float) -> int:
    """How many calls (this one included) ran in this worker at once, at most, meanwhile."""
    state = worker_state()
    lock = state.setdefault("lock", threading.Lock())
    active = state.setdefault("active", [])
    me = [0]
    with lock:
        active.append(me)
        for each in active:
            each[0] = max(each[0], len(active))
    time.sleep(seconds)
    with lock:
        active.remove(me)
    return me[0]


def exit_after(seconds: float) -> None:
    time.sleep(seconds)
    os._exit(3)


def crash_unless_alone(seconds: float) -> str:
    """Kills its worker when it shares the worker with another call; alone, it returns."""
    if count_alone(seconds) > 1:
        os._exit(3)
    return "alone"


_LOCK = asyncio.Lock()
_CLIENT = None


async def locked_get(url: str) -> tuple[int, int]:
    """A module-level lock, contended, and a module-level async HTTP client, kept."""
    global _CLIENT
    import httpx  # here: the workers import this module, most calls without it

    async with _LOCK:
        await asyncio.sleep(0.005)
    if _CLIENT is None:
        _CLIENT = httpx.AsyncClient(trust_env=False)
    response = await _CLIENT.get(url)
    return response.status_code, id(asyncio.get_running_loop())


# The tests.


@pytest.fixture(scope="module")
def pool():
    """One worker, three calls at once, the default (rss) limit of MEMORY_MB."""
    with WorkerPool(
        SandboxConfig(workers=1, memory_mb=MEMORY_MB), concurrency=3, name="contained"
    ) as shared:
        shared.submit(pid).result(timeout=30)
        yield shared


def _gone(pids: list[int], *, within_s: float = 2.0) -> bool:
    stop = time.monotonic() + within_s
    while any(running(p) for p in pids) and time.monotonic() < stop:
        time.sleep(0.02)
    return not any(running(p) for p in pids)


@pytest.mark.procs
def test_a_call_past_its_deadline_leaves_nothing_of_its_process_tree(tmp_path):
    path = tmp_path / "pids"
    with WorkerPool(SandboxConfig(workers=1, memory_mb=None), name="tree") as tree:
        tree.submit(pid).result(timeout=30)  # this module imported: not in the deadline
        future = tree.submit(start_children_then_hang, str(path), deadline_s=0.5)
        with pytest.raises(CallFailed) as caught:
            future.result(timeout=10)
        assert caught.value.kind == "timeout" and caught.value.own
        pids = [int(p) for p in path.read_text().split()]
        assert len(pids) == 4
        assert _gone(pids), [p for p in pids if running(p)]


@pytest.mark.procs
def test_children_made_with_clone_parent_die_with_the_worker(pool, tmp_path):
    path = tmp_path / "pids"
    future = pool.submit(clone_parent_children_then_hang, str(path), deadline_s=1.0)
    with pytest.raises(CallFailed) as caught:
        future.result(timeout=20)
    assert caught.value.kind == "timeout"
    siblings = [int(p) for p in path.read_text().split()]
    assert [int(_stat_of(p)[1]) for p in siblings] == [os.getpid()] * 2  # the pool's children
    assert _gone(siblings), [p for p in siblings if running(p)]
    for each in siblings:
        os.waitpid(each, 0)


def _stat_of(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()


@pytest.mark.procs
def test_kill_waits_for_what_it_froze_to_stop_and_leaves_no_fork_of_a_racing_tree(tmp_path):
    token = f"racer-{os.getpid()}-{time.monotonic_ns()}"
    racer = (  # every process forks as fast as it can, up to 60 in all (a file each)
        "import os, sys, time\n"
        "while True:\n"
        "    try:\n"
        "        os.close(os.open(f'{sys.argv[2]}/{os.getpid()}', os.O_CREAT | os.O_EXCL))\n"
        "    except OSError:\n"
        "        pass\n"
        "    if len(os.listdir(sys.argv[2])) >= 60:\n"
        "        time.sleep(300)\n"
        "    os.fork()\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", racer, token, str(tmp_path)])
    while len(list(tmp_path.iterdir())) < 20:
        time.sleep(0.005)
    kill_tree(proc.pid)
    proc.wait()
    stop = time.monotonic() + 5  # (the SIGKILLed take a moment to die under load)
    while (left := [p for p in _pids_with(token) if running(p)]) and time.monotonic() < stop:
        time.sleep(0.02)
    for each in left:  # escaped: killed here, so that the failure leaves nothing behind
        os.kill(each, signal.SIGKILL)
    assert left == [], left


@pytest.mark.procs
def test_wait_stopped_returns_once_every_thread_of_a_spinning_process_stopped():
    spin = "import threading\nthreading.Thread(target=lambda: [0 for _ in iter(int, 1)]).start()"
    proc = subprocess.Popen([sys.executable, "-c", spin + "\nwhile True: pass"])
    try:
        time.sleep(0.2)
        os.kill(proc.pid, signal.SIGSTOP)
        _wait_stopped({proc.pid}, until=time.monotonic() + 5)
        tasks = os.listdir(f"/proc/{proc.pid}/task")
        assert len(tasks) == 2 and {_task_state(proc.pid, t) for t in tasks} == {"T"}
    finally:
        proc.kill()
        proc.wait()


def _task_state(pid: int, task: str) -> str:
    return Path(f"/proc/{pid}/task/{task}/stat").read_text().rpartition(")")[2].split()[0]


def _pids_with(token: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and token in (entry / "cmdline").read_text():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.procs
def test_a_tree_past_the_process_bound_is_killed_whole_before_its_deadline(tmp_path, monkeypatch):
    monkeypatch.setattr("grouprl.sandbox.manager.MAX_PROCESSES", 6)  # read by the manager
    path = tmp_path / "pids"
    with WorkerPool(SandboxConfig(workers=1, memory_mb=None), name="forks") as forks:
        forks.submit(pid).result(timeout=30)
        started = time.monotonic()
        future = forks.submit(fork_then_hang, str(path), 12, deadline_s=30)
        with pytest.raises(CallFailed) as caught:
            future.result(timeout=20)
        assert time.monotonic() - started < 10, "killed at the bound, not at the deadline"
        assert caught.value.kind == "crash" and "more than 6" in caught.value.message
        assert _gone([int(p) for p in path.read_text().split()])
        assert forks.submit(pid).result(timeout=30) > 0  # a fresh worker took its place


@pytest.mark.procs
def test_close_leaves_nothing_of_the_workers_process_trees(pool):
    with WorkerPool(SandboxConfig(workers=1, memory_mb=None), name="closing") as closing:
        pids = closing.submit(start_children).result(timeout=30)
        assert all(running(p) for p in pids)
    assert _gone(pids), [p for p in pids if running(p)]


@pytest.mark.procs
def test_450_threads_start_under_the_default_memory_limit(pool):
    """RLIMIT_AS at 256 MB would refuse them (8 MB of stack reserved each)."""
    assert pool.submit(start_threads, 450, deadline_s=30).result() == 450


@pytest.mark.procs
def test_an_allocation_past_the_limit_is_killed_as_memory_and_the_pool_goes_on(pool):
    before = pool.stats()
    worker = pool.submit(pid).result()
    with pytest.raises(CallFailed) as caught:
        pool.submit(allocate_slowly, MEMORY_MB, deadline_s=30).result(timeout=30)
    failure = caught.value
    assert (failure.kind, failure.own) == ("memory", True)
    assert f"over its memory limit of {MEMORY_MB} MB" in failure.message
    assert int(failure.message.split()[3]) > MEMORY_MB  # "worker killed at N MB resident"
    assert pool.stats()["memory"] == before["memory"] + 1
    assert pool.submit(pid).result() != worker
    assert not running(worker)


@pytest.mark.procs
def test_without_network_a_worker_cannot_connect_and_with_it_can(pool):
    allowed, why = network_isolation()
    if not allowed:
        pytest.skip(why)
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        assert pool.submit(connect, port).result() == os.getuid()
        with WorkerPool(
            SandboxConfig(workers=1, memory_mb=None), name="offline", network=False
        ) as offline:
            with pytest.raises(CallFailed) as caught:
                offline.submit(connect, port).result(timeout=30)
            assert caught.value.kind == "error", caught.value.message
            assert "unreachable" in caught.value.message.lower()
            assert offline.submit(os.getuid).result() == os.getuid()  # ids map to themselves
            assert offline.network_refused is None


@pytest.mark.procs
def test_an_alone_call_runs_with_no_other_call_beside_it(pool):
    shared = [pool.submit(count_alone, 0.3) for _ in range(2)]
    alone = pool.submit(count_alone, 0.1, alone=True)
    after = pool.submit(count_alone, 0.1)
    assert [f.result(timeout=10) for f in shared] == [2, 2]
    assert alone.result(timeout=10) == 1
    assert after.result(timeout=10) == 1  # it waited behind the alone call


@pytest.mark.procs
def test_calls_lost_beside_a_crash_are_not_blamed_and_run_again_when_asked(pool):
    before = pool.stats()
    crash = pool.submit(exit_after, 0.1)
    kept = pool.submit(crash_unless_alone, 0.25, retry_lost=True)
    lost = pool.submit(count_alone, 0.25)
    assert kept.result(timeout=30) == "alone"  # ran again, alone, on the next worker
    for future in (crash, lost):
        with pytest.raises(CallFailed) as caught:
            future.result(timeout=30)
        assert (caught.value.kind, caught.value.own) == ("crash", False)
    stats = pool.stats()
    assert stats["retried"] - before["retried"] == 1
    assert stats["crashes"] - before["crashes"] == 2


@pytest.mark.procs
def test_a_retried_call_that_fails_again_is_its_own_failure_and_not_retried_twice(pool):
    before = pool.stats()
    first = pool.submit(exit_after, 0.1, retry_lost=True)
    second = pool.submit(count_alone, 0.25, retry_lost=True)
    assert second.result(timeout=30) == 1
    with pytest.raises(CallFailed) as caught:
        first.result(timeout=30)
    assert (caught.value.kind, caught.value.own, caught.value.exit_code) == ("crash", True, 3)
    assert pool.stats()["retried"] - before["retried"] == 2


@pytest.mark.procs
def test_a_pinned_call_is_never_retried(pool):
    crash = pool.submit(exit_after, 0.1, worker=0)
    pinned = pool.submit(count_alone, 0.25, worker=0, retry_lost=True)
    for future in (crash, pinned):
        with pytest.raises(CallFailed) as caught:
            future.result(timeout=30)
        assert (caught.value.kind, caught.value.own) == ("crash", False)


@pytest.mark.procs
def test_abandon_fails_running_and_queued_calls_and_kills_their_workers(pool):
    before = pool.stats()
    worker = pool.submit(pid).result(timeout=30)
    running_call = pool.submit(time.sleep, 3600)
    queued = pool.submit(time.sleep, 3600, alone=True)
    time.sleep(0.1)  # the first is in the worker
    assert pool.abandon([running_call, queued], message="step deadline") == 2
    for future in (running_call, queued):
        with pytest.raises(CallFailed) as caught:
            future.result(timeout=1)
        assert (caught.value.kind, caught.value.message) == ("timeout", "step deadline")
    assert pool.abandon([running_call]) == 0  # done already
    assert pool.submit(pid).result(timeout=30) != worker
    assert _gone([worker])
    assert pool.stats()["timeouts"] - before["timeouts"] == 2


@pytest.mark.procs
def test_async_code_keeps_one_event_loop_for_the_process(pool):
    """A contended module-level asyncio.Lock and a module-level httpx.AsyncClient work
    from call to call (a loop per call would break both from the second call on)."""
    from grouprl.sandbox.user_code import awaited_call  # here: it imports grouprl.config,
    # and the workers import this module

    handler = type(
        "Ok", (http.server.BaseHTTPRequestHandler,), {"do_GET": _ok, "log_message": _quiet}
    )
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    try:
        futures = [pool.submit(locked_get, url, deadline_s=10) for _ in range(6)]
        results = [f.result(timeout=30) for f in futures]
        assert {status for status, _ in results} == {200}
        assert len({loop for _, loop in results}) == 1
        here = [awaited_call(locked_get, url) for _ in range(3)]  # and in this process
        assert len({loop for _, loop in here}) == 1
    finally:
        server.shutdown()
        server.server_close()


def _ok(self) -> None:
    self.send_response(200)
    self.send_header("Content-Length", "0")
    self.end_headers()


def _quiet(self, *args) -> None:
    pass


def test_call_failed_pickles_with_own():
    failure = pickle.loads(pickle.dumps(CallFailed("crash", "lost", exit_code=-9, own=False)))
    assert (failure.kind, failure.message, failure.exit_code, failure.own) == (
        "crash",
        "lost",
        -9,
        False,
    )


def test_a_refused_namespace_is_said_with_its_reason_and_fix():
    text = refusal(errno.EPERM)
    assert "refuses unprivileged user namespaces" in text and "keep the network" in text


def test_the_run_start_line_says_what_is_contained(caplog):
    from grouprl.config.schema import RunConfig
    from grouprl.rollout.builder import log_containment

    with caplog.at_level(logging.INFO, logger="grouprl.rollout.builder"):
        log_containment(RunConfig())  # reward.network=false by default
    [line, *warning] = [r.getMessage() for r in caplog.records]
    assert "reward workers: " in line and "rss limit 4096 MB" in line
    allowed, why = network_isolation()
    if allowed and host_socket_isolation()[0]:
        no_sockets = "no network (own user+network namespace; no Unix or vsock sockets (seccomp))"
        assert no_sockets in line and not warning
    elif allowed:
        assert "but the host's Unix sockets reachable" in line
        assert warning[0].startswith("reward.network=false cannot be kept")
    else:
        assert why in line and warning[0].startswith("reward.network=false cannot be kept")


def test_the_run_start_names_the_program_sandbox_where_code_tests_scores(caplog):
    from grouprl.config.schema import RunConfig
    from grouprl.rollout.builder import log_containment

    cfg = RunConfig(reward={"functions": [{"name": "code_tests"}], "correct_function": None})
    with caplog.at_level(logging.INFO, logger="grouprl.rollout.builder"):
        log_containment(cfg)
    lines = [r.getMessage() for r in caplog.records]
    assert any(x.startswith("program sandbox (code_tests, docs/code.md): ") for x in lines), lines
