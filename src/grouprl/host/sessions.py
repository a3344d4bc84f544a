"""Child processes that a signal to the run's whole process group does not reach.

Ctrl-C in a terminal sends SIGINT to every process of the foreground process group;
`timeout`, a batch scheduler or ``kill -- -PGID`` send SIGTERM the same way. The driver
catches it, saves a checkpoint after the step and exits with 75 (``ckpt/preempt.py``),
so the processes it started must outlive the signal until the driver closes them::

    driver (catches the signal, saves, then closes its children)
      ├─ sandbox worker (WorkerPool): born with SIGINT/SIGTERM blocked, then ignores both
      └─ vLLM engine core (own_session): born blocked, in a session of its own before
           │  Python starts; vLLM's own handlers, and its shutdown by SIGTERM, still work
           └─ vLLM worker: inherits the engine core's session

A child started from a thread that blocks the signals inherits the mask, so a signal
sent while it starts stays pending instead of killing it half-way; the child then drops
it (setting SIG_IGN discards a pending signal) and unblocks. Ignoring is enough for the
sandbox workers, whose code is ours. vLLM's engine core and workers install their own
SIGINT/SIGTERM handlers (a signal there means "shut down"), so an ignored disposition
inherited from the driver would not survive; they run in a session of their own instead.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SIGNALS = (signal.SIGINT, signal.SIGTERM)

_SESSIONS: set[int] = set()
"""Sessions (= process groups) of children started by ``own_session`` and still open."""
_SESSIONS_LOCK = threading.Lock()

# Run by the wrapper's Python (``-I -S``: no site, starts in ~10 ms) in the child, then
# replaced by the real interpreter with the same pid: a new session (and process group),
# killed with the thread that started it (PR_SET_PDEATHSIG, Linux), signals unblocked
# with the ones that came while it started dropped. No single quotes: the shell quotes it.
_LEAVE_THE_GROUP = """
import os, signal, sys
os.setsid()
try:
    import ctypes
    ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)
except Exception:
    pass
for sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(sig, signal.SIG_IGN)
signal.pthread_sigmask(signal.SIG_UNBLOCK, (signal.SIGINT, signal.SIGTERM))
for sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(sig, signal.SIG_DFL)
os.execv(sys.executable, [sys.executable] + sys.argv[1:])
"""


@contextmanager
def blocked_signals() -> Iterator[None]:
    """The calling thread blocks SIGINT and SIGTERM in the block (the process still gets
    them: the kernel hands them to another thread); children it starts inherit the mask."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def ignore_group_signals() -> None:
    """In a child started under ``blocked_signals``: ignore SIGINT and SIGTERM from now on
    (dropping any that came while it started), then unblock them."""
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)


@contextmanager
def own_session(scratch_dir: str | os.PathLike) -> Iterator[list[int]]:
    """``multiprocessing`` "spawn" children started in the block run in a session of
    their own (so do their descendants); the list yielded gets their pids.

    It swaps the interpreter that spawn starts (``multiprocessing.set_executable``) for a
    shell script in ``scratch_dir`` that leaves the session, then runs the interpreter,
    and blocks the signals in this thread meanwhile. The swap is process-wide: a child
    another thread spawns in the block is moved too. It acts in the main thread only (a
    child dies with the thread that started it, PR_SET_PDEATHSIG), and where the script
    can run (POSIX, ``scratch_dir`` not mounted noexec); elsewhere children start as usual.
    """
    from multiprocessing import active_children, resource_tracker, spawn

    started: list[int] = []
    on_main = threading.current_thread() is threading.main_thread()
    wrapper = _write_wrapper(Path(scratch_dir)) if on_main else None
    if wrapper is None:
        yield started
        return
    resource_tracker.ensure_running()  # not in the block: it ignores the signals itself
    before = {p.pid for p in active_children()}
    previous = spawn.get_executable()
    spawn.set_executable(wrapper)
    try:
        with blocked_signals():
            yield started
    finally:
        spawn.set_executable(previous)
        # (a child may not have left the group yet: its wrapper runs for a few ms)
        started += [p.pid for p in active_children() if p.pid is not None and p.pid not in before]
        with _SESSIONS_LOCK:
            _SESSIONS.update(started)


def close_sessions(pids: list[int], *, kill: bool = False) -> None:
    """Forget sessions whose leaders were shut down (``kill``: SIGKILL what is left of
    them first); a forgotten id may be reused by an unrelated process group."""
    with _SESSIONS_LOCK:
        for pid in pids:
            if kill and pid in _SESSIONS:
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
            _SESSIONS.discard(pid)


def kill_sessions() -> None:
    """SIGKILL every process of every open session (a driver exiting at once: nothing it
    started in a session of its own may outlive it)."""
    # no lock: this runs in a signal handler, which may interrupt the main thread while
    # it holds the lock; tuple() copies the set in one step under the GIL
    for pid in tuple(_SESSIONS):
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
    _SESSIONS.clear()


def _write_wrapper(scratch_dir: Path) -> str | None:
    if os.name != "posix" or not Path("/bin/sh").is_file():
        return None
    scratch_dir.mkdir(parents=True, exist_ok=True)
    if os.statvfs(scratch_dir).f_flag & getattr(os, "ST_NOEXEC", 0):
        return None
    from multiprocessing import spawn

    python = os.fsdecode(spawn.get_executable())
    path = scratch_dir / f"python-own-session-{os.getuid()}"  # /tmp is shared
    partial = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}")
    partial.write_text(
        "#!/bin/sh\n# written by grouprl.host.sessions: a Python in a session of its own\n"
        f'exec {shlex.quote(python)} -I -S -c {shlex.quote(_LEAVE_THE_GROUP)} "$@"\n'
    )
    partial.chmod(0o755)
    os.replace(partial, path)  # another run's child may be starting it right now
    return str(path)
