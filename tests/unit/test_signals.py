"""A Ctrl-C or SIGTERM to the run's process group misses the processes the run starts:
sandbox workers ignore both (quietly, and keep serving); a vLLM engine's processes run in
a session of their own, with default handlers, and die with a driver that exits at once."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

import pytest

from grouprl.config.containment import SandboxConfig
from grouprl.host.sessions import close_sessions, kill_sessions, own_session
from grouprl.sandbox import WorkerPool

pytestmark = [
    pytest.mark.skipif(os.name != "posix", reason="process groups and sessions"),
    pytest.mark.procs,
]


def pid() -> int:
    return os.getpid()


def report(queue) -> None:
    """In an ``own_session`` child: what a group signal would find, then wait."""
    queue.put(
        {
            "pid": os.getpid(),
            "sid": os.getsid(0),
            "pgid": os.getpgid(0),
            "sigint_raises": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
            "blocked": signal.pthread_sigmask(signal.SIG_BLOCK, []),
        }
    )
    time.sleep(60)


def test_a_pool_worker_rides_out_sigint_and_sigterm_quietly(capfd):
    with WorkerPool(SandboxConfig(workers=1, memory_mb=None), name="signals") as pool:
        first = pool.submit(pid).result(timeout=30)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGINT):
            os.kill(first, sig)
        time.sleep(0.3)
        assert pool.submit(pid).result(timeout=30) == first  # the same process serves
        assert pool.stats()["restarts"] == 0 and pool.generation(0) == 1
    assert "KeyboardInterrupt" not in capfd.readouterr().err


def test_own_session_children_lead_a_session_with_default_handlers(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    with own_session(tmp_path) as started:
        child = ctx.Process(target=report, args=(queue,))
        child.start()
    try:
        seen = queue.get(timeout=60)
        assert started == [child.pid]
        # its own session and group: a signal to the driver's group does not reach it
        assert seen["sid"] == seen["pgid"] == child.pid != os.getsid(0)
        # signals work there as in any Python program: vLLM's shutdown SIGTERMs it by pid
        assert seen["sigint_raises"] and seen["blocked"] == set()
        assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == set()  # ours is restored
        kill_sessions()  # what a driver exiting at once does
        child.join(10)
        assert child.exitcode == -signal.SIGKILL
    finally:
        close_sessions(started, kill=True)
        child.join(10)
