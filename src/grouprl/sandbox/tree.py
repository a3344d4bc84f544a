"""A worker's process tree, read from ``/proc`` (Linux): its descendants, their resident
memory, and a kill that leaves none of them running.

::

    worker (leads its own session and process group; child subreaper)
      ├─ child (the worker's group)        found by the ppid chain, and by the group
      │    └─ grandchild (setsid: own group) found by the ppid chain; its group killed too
      └─ orphan of a double fork            reparented to the worker (the subreaper): found

``kill_tree`` first freezes (SIGSTOP) every process it finds and walks again until a walk
finds nothing new (a stopped process cannot fork, so a fork bomb cannot outrun it), then
SIGKILLs each process and each process group, the worker's included. Killed descendants
stay zombies until their parent is reaped; a zombie runs nothing, and ``running`` says so.
Elsewhere than Linux the tree is the worker alone.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_PROC = Path("/proc")
_FREEZE_ROUNDS = 100
"""Walks at most, in one kill: each round freezes what the last one found."""


def _stat(pid: int) -> tuple[str, int, int] | None:
    """``(state, ppid, pgid)`` of ``pid``, None when it is gone."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()  # after the command name, which may hold spaces
    return fields[0], int(fields[1]), int(fields[2])


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
        kids = _children(parent)
        if kids is None:  # no /proc/<pid>/task/*/children (CONFIG_PROC_CHILDREN off)
            by_parent = by_parent if by_parent is not None else _every_parent()
            kids = by_parent.get(parent, [])
        found += kids
        parents += kids
    return found


def _children(pid: int) -> list[int] | None:
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
    """SIGKILL ``pid``, every descendant and every process group among them (frozen
    first, walked until none is left), without reaping ``pid``: its parent does that."""
    frozen: set[int] = set()
    for _ in range(_FREEZE_ROUNDS):
        fresh = [p for p in (pid, *descendants(pid)) if p not in frozen and running(p)]
        if not fresh:
            break
        for each in fresh:
            _signal(each, signal.SIGSTOP)
        frozen.update(fresh)
    mine = {0, 1, os.getpgrp()}
    groups = ({pid} | {s[2] for p in frozen if (s := _stat(p)) is not None}) - mine
    for group in groups:
        with contextlib.suppress(OSError):
            os.killpg(group, signal.SIGKILL)
    for each in frozen | {pid}:
        _signal(each, signal.SIGKILL)


def _signal(pid: int, sig: int) -> None:
    if pid != os.getpid():
        with contextlib.suppress(OSError):  # gone already
            os.kill(pid, sig)
