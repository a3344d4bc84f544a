"""A worker's process tree, read from ``/proc`` (Linux): its descendants, their resident
memory, and a kill that leaves none of them running.

::

    parent (the pool; for a program, the process that runs it)
      ├─ worker (leads its own session and process group; child subreaper)
      │    ├─ child (the worker's group)        found by the ppid chain, and by the group
      │    │    └─ grandchild (setsid: own group) found by the ppid chain; its group killed
      │    └─ orphan of a double fork            reparented to the worker (the subreaper)
      └─ sibling: made by the worker with clone(CLONE_PARENT), so the parent's child; found
         among the parent's children in the worker's session (or process group)

``kill_tree`` first freezes (SIGSTOP) every process it finds and walks again until every
frozen process has stopped (state T in ``/proc``: one running on another core when the
signal was sent may fork once more before it stops) and a walk finds nothing new (a
stopped process cannot fork, so a fork bomb cannot outrun it), then SIGKILLs each process
and each process group, the worker's included. Killed descendants stay zombies until
their parent is reaped; a zombie runs nothing, and ``running`` says so. Not found: a
sibling that left the worker's session too (``setsid`` after ``CLONE_PARENT``); a worker
without network cannot make one (its seccomp filter refuses ``CLONE_PARENT``:
``sandbox/seccomp.py``). Elsewhere than Linux the tree is the worker alone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_PROC = Path("/proc")
_FREEZE_ROUNDS = 100
"""Walks at most, in one kill: each round freezes what the last one found."""
_STOP_WAIT_S = 1.0
"""How long one kill waits, at most, for the processes it froze to stop: a few ms where
the machine is idle, tens where 60 processes fork on two busy cores (each must be
scheduled to take the signal). One that does not stop (in the kernel, uninterruptible)
cannot fork meanwhile either: past this the kill goes on without it."""


def _stat(pid: int, task: str = "") -> tuple[str, int, int, int] | None:
    """``(state, ppid, pgid, session)`` of ``pid`` (of its thread ``task``, given one),
    None when it is gone."""
    where = _PROC / str(pid) / "task" / task if task else _PROC / str(pid)
    try:
        text = (where / "stat").read_text()
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()  # after the command name, which may hold spaces
    return fields[0], int(fields[1]), int(fields[2]), int(fields[3])


def running(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie (a killed process not yet reaped)."""
    if not _PROC.is_dir():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    stat = _stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, theirs, ...), zombies included."""
    if not _PROC.is_dir():
        return []
    found: list[int] = []
    parents = [pid]
    by_parent: dict[int, list[int]] | None = None
    while parents:
        parent = parents.pop()
        kids = children(parent)
        if kids is None:
            by_parent = by_parent if by_parent is not None else _every_parent()
            kids = by_parent.get(parent, [])
        found += kids
        parents += kids
    return found


def children(pid: int) -> list[int] | None:
    """The children of ``pid`` ([] when it is gone); None where the kernel does not list
    them (no ``/proc/<pid>/task/*/children``: CONFIG_PROC_CHILDREN off)."""
    kids: list[int] = []
    try:
        tasks = list((_PROC / str(pid) / "task").iterdir())
    except (FileNotFoundError, ProcessLookupError):  # it ended since it was listed
        return kids
    for task in tasks:
        try:
            kids += [int(k) for k in (task / "children").read_text().split()]
        except FileNotFoundError:
            if not (task / "children").parent.exists():
                continue  # the thread ended meanwhile
            return None
        except OSError:
            continue
    return kids


def _every_parent() -> dict[int, list[int]]:
    by_parent: dict[int, list[int]] = {}
    for entry in _PROC.iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            by_parent.setdefault(stat[1], []).append(int(entry.name))
    return by_parent


def usage(pid: int) -> tuple[float, int]:
    """``(resident MB, processes)`` of ``pid`` and its descendants together (pages shared
    between them count once per process; zombies count as processes)."""
    tree = (pid, *descendants(pid))
    pages = 0
    for each in tree:
        with contextlib.suppress(OSError, IndexError, ValueError):
            pages += int((_PROC / str(each) / "statm").read_text().split()[1])
    return pages * _PAGE / 2**20, len(tree)


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid``, every descendant, every sibling it made with ``CLONE_PARENT`` and
    every process group among them (frozen first, walked until every frozen process has
    stopped and none is left), without reaping ``pid``: its parent does that."""
    frozen: set[int] = set()
    settled = False
    stop_by = time.monotonic() + _STOP_WAIT_S
    for _ in range(_FREEZE_ROUNDS):
        fresh = [p for p in _members(pid) if p not in frozen and running(p)]
        if fresh:
            for each in fresh:
                _signal(each, signal.SIGSTOP)
            frozen.update(fresh)
            settled = False
        elif settled or not frozen:
            break  # every frozen process stopped before this walk, which found none new
        else:
            _wait_stopped(frozen, until=stop_by)
            settled = True
    mine = {0, 1, os.getpgrp()}
    groups = ({pid} | {s[2] for p in frozen if (s := _stat(p)) is not None}) - mine
    for group in groups:
        with contextlib.suppress(OSError):
            os.killpg(group, signal.SIGKILL)
    for each in frozen | {pid}:
        _signal(each, signal.SIGKILL)


def _members(pid: int) -> list[int]:
    """``pid``, its descendants, its ``CLONE_PARENT`` siblings and theirs."""
    found = [pid, *descendants(pid)]
    for sibling in _siblings(pid):
        found += [sibling, *descendants(sibling)]
    return found


def _siblings(pid: int) -> list[int]:
    """The other children of ``pid``'s parent in the session or process group that
    ``pid`` leads: made by ``pid`` with ``clone(CLONE_PARENT)`` (or by such a sibling),
    since only a process of ``pid``'s tree is in it."""
    stat = _stat(pid)
    if stat is None or not _PROC.is_dir():
        return []
    kids = children(stat[1])
    if kids is None:
        kids = _every_parent().get(stat[1], [])
    return [k for k in kids if k != pid and (s := _stat(k)) is not None and pid in s[2:]]


def _wait_stopped(pids: set[int], *, until: float) -> None:
    """Until each of ``pids`` has stopped (every thread in state T, t, Z or X, or gone),
    or ``until`` (a ``time.monotonic()`` time)."""
    waiting = set(pids)
    while waiting := {p for p in waiting if not _stopped(p)}:
        if time.monotonic() >= until:
            return
        time.sleep(0.0005)


def _stopped(pid: int) -> bool:
    try:
        tasks = os.listdir(_PROC / str(pid) / "task")
    except OSError:
        return True  # gone
    return all((s := _stat(pid, task)) is None or s[0] in "TtZX" for task in tasks)


def _signal(pid: int, sig: int) -> None:
    if pid != os.getpid():
        with contextlib.suppress(OSError):  # gone already
            os.kill(pid, sig)
