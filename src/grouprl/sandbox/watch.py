"""The parent's side of a sandboxed program (``run_program``): start the launcher, read
its stdout, stderr and status pipe as they come, watch the tree's memory, CPU time and
processes in /proc, kill the whole tree at the deadline or past a limit, and reap it.

::

    watch(launcher, spec, limits) ── Popen(python -I -S launcher.py SPEC FD), own session
      │ select() on stdout, stderr, status  ── past output_bytes: killed
      │ every 0.1 s: /proc/<pid>/stat, smaps_rollup and fd/ of each process of the tree
      │   Pss + memfds held > memory_mb: killed ("memory"); CPU > cpu_s: killed
      │   ("signaled", SIGXCPU);
      │   processes > processes + 1: killed ("signaled", SIGKILL)
      ▼ deadline: killed ("timeout"); always after: kill_tree (freeze, SIGKILL), wait4
    Watched(stdout, stderr, status lines, killed, cpu_s)

``limits`` is a ``ProgramLimits`` (read by attribute: this module does not import
program.py, which builds on it).
"""

from __future__ import annotations

import ast
import contextlib
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Literal

from grouprl.host.tree import children, descendants, kill_tree

Outcome = Literal["exited", "timeout", "memory", "output_limit", "signaled", "sandbox_error"]
"""How a program run ended (``sandbox/program.ProgramResult.outcome``)."""

POLL_S = 0.1
"""How often the tree's memory, CPU time and processes are read from /proc."""
_PAGE = os.sysconf("SC_PAGE_SIZE")
_TICK = os.sysconf("SC_CLK_TCK")


class Watched:
    """One run as the parent sees it: the pipes, what was read, why it was killed."""

    def __init__(self, proc: subprocess.Popen, status_fd: int, limits: Any):
        self.proc = proc
        self.limits = limits
        assert proc.stdout is not None and proc.stderr is not None  # started with PIPEs
        self.names = {proc.stdout.fileno(): "stdout", proc.stderr.fileno(): "stderr"}
        self.kept = {fd: bytearray() for fd in self.names}
        self.seen = dict.fromkeys(self.names, 0)
        self.status = bytearray()
        self.status_fd = status_fd
        self.killed: tuple[Outcome, str, int | None] | None = None
        """(outcome, why, signal) when the watch killed the tree."""
        self.stdout = b""
        self.stderr = b""
        """What was kept of each (the first ``output_bytes``), set when the run ends."""
        self.cpu_s = 0.0
        """CPU seconds of the tree: the largest reading, or the launcher's rusage (a
        killed tree is not reaped by the launcher, so its rusage misses them)."""

    def lines(self) -> list[str]:
        """The launcher's status lines."""
        return self.status.decode(errors="replace").splitlines()

    def layers(self) -> dict:
        """The layers the launcher reported (bools and strings), empty before."""
        for line in self.lines():
            if line.startswith("layers "):
                return ast.literal_eval(line[len("layers ") :])
        return {}


def watch(launcher: str, spec_path: str, limits: Any, start: float) -> Watched:
    """Run ``launcher`` on ``spec_path`` to its end or its kill; every process it started
    is gone on return. Raises OSError only where the launcher cannot be started."""
    status_r, status_w = os.pipe()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", launcher, spec_path, str(status_w)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(status_w,),
            start_new_session=True,
            env={},
        )
    except OSError:
        os.close(status_r)
        raise
    finally:
        os.close(status_w)
    run = Watched(proc, status_r, limits)
    try:
        _pump(run, start)
    finally:
        kill_tree(proc.pid)  # whatever is left (nothing, after a normal end)
        run.cpu_s = max(run.cpu_s, _reap(proc))
        run.stdout, run.stderr = (bytes(kept) for kept in run.kept.values())
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        os.close(status_r)
    return run


def _pump(run: Watched, start: float) -> None:
    """Read stdout, stderr and the status pipe until all three close; kill at the
    deadline, past the output cap, the memory, CPU or process limit."""
    limits = run.limits
    deadline = start + limits.wall_s
    with selectors.DefaultSelector() as sel:
        for fd in (*run.kept, run.status_fd):
            sel.register(fd, selectors.EVENT_READ)
        next_poll = time.monotonic() + POLL_S
        while sel.get_map():
            now = time.monotonic()
            if now >= deadline:
                run.killed = ("timeout", f"still running after wall_s={limits.wall_s}", None)
                return
            for key, _ in sel.select(timeout=max(0.0, min(deadline, next_poll) - now)):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fd)
                elif key.fd == run.status_fd:
                    run.status += chunk
                else:
                    kept = run.kept[key.fd]
                    kept += chunk[: max(0, limits.output_bytes - len(kept))]
                    run.seen[key.fd] += len(chunk)
                    if run.seen[key.fd] > limits.output_bytes:
                        why = f"{run.names[key.fd]} passed output_bytes={limits.output_bytes}"
                        run.killed = ("output_limit", why, None)
                        return
            if time.monotonic() >= next_poll:
                next_poll = time.monotonic() + POLL_S
                if _over_usage(run):
                    return


def _over_usage(run: Watched) -> bool:
    """Read the program tree's resident memory, CPU time and processes from /proc; kill
    past a limit. The launcher (and init, with namespaces) are not the program's: their
    memory is left out, their CPU time (~0.03 s) counted."""
    ours = {run.proc.pid}
    if run.layers().get("pid_ns"):
        ours.update(children(run.proc.pid) or ())  # init
    pids = [run.proc.pid, *descendants(run.proc.pid)]
    rss_kb, ticks = 0, 0
    held: set[tuple[int, int]] = set()
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            ticks += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
            if pid not in ours:
                rss_kb += _resident_kb(pid, fields) + _memfd_kb(pid, held)
    limits = run.limits
    rss_mb = rss_kb / 1024
    cpu_s = ticks / _TICK
    run.cpu_s = max(run.cpu_s, cpu_s)
    if rss_mb > limits.memory_mb:
        why = f"memory of the tree (Pss, memfds) {rss_mb:.0f} MB > memory_mb={limits.memory_mb}"
        run.killed = ("memory", why, None)
    elif cpu_s > limits.cpu_s + 0.5:
        why = f"the tree used {cpu_s:.1f} CPU seconds > cpu_s={limits.cpu_s}"
        run.killed = ("signaled", why, signal.SIGXCPU)
    elif len(pids) - len(ours) > limits.processes + 1:
        count = len(pids) - len(ours)
        why = f"{count} processes > processes={limits.processes} + 1 (the program itself)"
        run.killed = ("signaled", why, signal.SIGKILL)
    return run.killed is not None


def _resident_kb(pid: int, stat_fields: list[str]) -> int:
    """Proportional resident memory (Pss: a page shared by n processes counts 1/n, so
    forked copies are not counted many times over), else resident pages from stat."""
    # (no smaps_rollup: < 4.14)
    with (
        contextlib.suppress(OSError, ValueError, IndexError),
        open(f"/proc/{pid}/smaps_rollup", "rb") as file,
    ):
        for line in file:
            if line.startswith(b"Pss:"):
                return int(line.split()[1])
    return int(stat_fields[21]) * _PAGE // 1024


def _memfd_kb(pid: int, counted: set[tuple[int, int]]) -> int:
    """Memory in the in-memory files (memfd_create) ``pid`` holds open, each file once
    (``counted``: those seen in the tree already). No Pss counts them where they are not
    mapped: a program could otherwise keep open_files x file_mb per process past
    memory_mb. (A memfd also mapped counts twice: the limit errs on the safe side.)"""
    kb = 0
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                if not os.readlink(f"/proc/{pid}/fd/{fd}").startswith("/memfd:"):
                    continue
                st = os.stat(f"/proc/{pid}/fd/{fd}")
                if (st.st_dev, st.st_ino) not in counted:
                    counted.add((st.st_dev, st.st_ino))
                    kb += st.st_blocks // 2  # 512-byte blocks
    return kb


def _reap(proc: subprocess.Popen) -> float:
    """Wait for the launcher (its tree is dead or dying); CPU seconds of all it reaped."""
    while True:
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except InterruptedError:
            continue
        except ChildProcessError:
            return 0.0
        proc.returncode = os.waitstatus_to_exitcode(status)
        return usage.ru_utime + usage.ru_stime
