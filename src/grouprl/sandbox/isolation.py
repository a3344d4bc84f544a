"""A worker without network: its own user and network namespace (Linux).

::

    WorkerPool(network=False) ──► worker: serve() ── unshare(CLONE_NEWUSER | CLONE_NEWNET)
                                        │  first, while it has one thread (the kernel
                                        │  refuses a threaded process)
                                        ▼
                      a network namespace of its own: one loopback device, down, so
                      connect() to any address fails (ENETUNREACH); the pipe to the
                      parent, open before, works on. Its uid and gid map to themselves:
                      files and os.getuid() look as before. A worker that is host root
                      maps nobody (65534) too, written by a helper child that stays
                      outside (mapping more than one's own id takes CAP_SETUID over the
                      parent namespace): a program sandbox started from the worker then
                      drops to nobody (sandbox/launcher.py) as from the trainer.

Then the worker loads a seccomp filter against what no network namespace encloses, the
host's path-named Unix sockets and vsock (``sandbox/seccomp.py``).

Unprivileged user namespaces are needed (``unshare -rn true`` succeeds as the user). Where
the kernel refuses them, the worker keeps the network: ``network_isolation()`` says so,
the pool logs it, the run warns at start and ``grouprl plan`` shows why;
``isolation_problems`` turns that into a refusal where ``*.sandbox.require_isolation``.
"""

from __future__ import annotations

import ctypes
import os
import sys

from grouprl.config.env_keys import BUILT_IN_ENVS
from grouprl.config.schema import RunConfig
from grouprl.host.namespaces import (  # the probe sits below the sandbox: plan reads it too
    CLONE_NEWNET,
    CLONE_NEWUSER,
    NO_HOST_SOCKETS,
    OWN_NETWORK,
    host_socket_isolation,
    network_isolation,
    refusal,
)


def enter_own_network() -> str | None:
    """Move this (single-threaded) process into a new user and network namespace; None
    when done, else why not (the process then keeps the network). Its own uid and gid
    map to themselves; where it is host root, nobody (65534) too (``_wide_maps``)."""
    if not sys.platform.startswith("linux"):
        return f"network namespaces are Linux only (this is {sys.platform})"
    uid, gid = os.getuid(), os.getgid()
    libc = ctypes.CDLL(None, use_errno=True)
    helper = _MapHelper() if uid == 0 else None  # forked before: it stays outside
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        if helper is not None:
            helper.finish(go=False)
        return refusal(err)
    if helper is not None and helper.finish(go=True):
        return None
    maps = (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1"))
    for name, text in maps:
        try:
            with open(f"/proc/self/{name}", "w") as file:
                file.write(text)
        except OSError:
            break  # unmapped ids read as 65534 ("nobody"); the namespace holds all the same
    return None


NOBODY = 65534
"""The id a root worker maps besides its own: who the program sandbox runs programs as."""


class _MapHelper:
    """A child forked before ``unshare`` (so it keeps host root's CAP_SETUID over the
    parent namespace, which writing a map of more than one's own id needs): on ``go``
    it writes the worker's uid and gid maps, ``0 0 1`` and ``65534 65534 1``, or where
    the wider map is refused (an enclosing namespace without 65534) ``0 0 1`` alone.
    setgroups stays allowed: the launcher drops its groups before it drops to nobody."""

    def __init__(self) -> None:
        go_r, self.go_w = os.pipe()
        self.done_r, done_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the helper: two writes to /proc, then gone
            code = 1
            try:
                os.close(self.go_w)
                os.close(self.done_r)
                if os.read(go_r, 1) == b"1":
                    os.write(done_w, b"1" if _wide_maps(os.getppid()) else b"0")
                code = 0
            finally:
                os._exit(code)
        os.close(go_r)
        os.close(done_w)

    def finish(self, *, go: bool) -> bool:
        """Tell the helper to write the maps (``go``) or to leave; whether it wrote them."""
        try:
            if go:
                os.write(self.go_w, b"1")
            os.close(self.go_w)
            done = os.read(self.done_r, 1) == b"1"
        finally:
            os.close(self.done_r)
            os.waitpid(self.pid, 0)
        return done


def _wide_maps(pid: int) -> bool:
    """Write ``pid``'s uid and gid maps: its root and nobody, else its root alone."""
    for wide in (f"0 0 1\n{NOBODY} {NOBODY} 1\n", "0 0 1\n"):
        try:
            for name in ("uid_map", "gid_map"):
                with open(f"/proc/{pid}/{name}", "w") as file:
                    file.write(wide)
            return True
        except OSError:
            continue  # a map is written once: a failed write leaves it unwritten
    return False


def containment(*, network: bool, memory_mb: int | None, memory_limit: str) -> tuple[str, bool]:
    """What a pool's workers are held to, in a phrase ("no network (own user+network
    namespace; no Unix or vsock sockets (seccomp)), rss limit 4096 MB, ..."), and whether
    ``network=False`` cannot be kept whole on this machine (the caller warns)."""
    refused = False
    if network:
        net = "network allowed"
    else:
        allowed, why = host_socket_isolation()
        refused = not allowed
        if allowed:
            net = f"no network ({OWN_NETWORK}; {NO_HOST_SOCKETS})"
        elif network_isolation()[0]:
            net = f"no network ({OWN_NETWORK}), but the host's Unix sockets reachable: {why}"
        else:
            net = f"network ON though off: {why}"
    memory = "no memory limit" if memory_mb is None else f"{memory_limit} limit {memory_mb} MB"
    return f"{net}, {memory}, each worker killed with all its processes", refused


_FIX = (
    "run where `unshare -rn true` succeeds as the trainer's user (sysctl "
    "kernel.unprivileged_userns_clone=1, kernel.apparmor_restrict_unprivileged_userns=0, "
    "user.max_user_namespaces > 0; in a container, a seccomp profile that allows "
    "unshare), or set {key}=false to run without it (a WARNING at the start)"
)


def isolation_problems(cfg: RunConfig) -> list[str]:
    """For each section with ``sandbox.require_isolation: true``, what it asks for that
    this machine cannot hold, as messages naming the key, what was refused and the fix:
    ``network: false`` without its namespace or socket filter; ``code_tests`` programs
    without namespaces (reward); user code run in this process (env, ``workers: 0``).
    Probes once per process (~0.1 s with ``code_tests``)."""
    from grouprl.sandbox.program import isolation  # (its probe runs the launcher)

    problems = []
    user_env = cfg.env.agent is not None or cfg.env.name not in BUILT_IN_ENVS
    for who, network, box in (
        ("reward", cfg.reward.network, cfg.reward.sandbox),
        ("env", cfg.env.network, cfg.env.sandbox),
    ):
        key = f"{who}.sandbox.require_isolation"
        if not box.require_isolation or (who == "env" and not user_env):
            continue
        if who == "env" and box.workers == 0:
            problems.append(
                f"{key}=true, but env.sandbox.workers=0 runs the environment and agent in "
                f"this process, uncontained. Fix: set env.sandbox.workers to 1 or more, or "
                f"{key}=false"
            )
        allowed, why = host_socket_isolation()
        if not network and not allowed:
            problems.append(
                f"{key}=true, but {who}.network=false cannot be kept here: {why}. Fix: "
                + _FIX.format(key=key)
            )
        code_tests = any(f.name == "code_tests" for f in cfg.reward.functions)
        if who == "reward" and code_tests and (found := isolation())["mount_ns"] is not True:
            problems.append(
                f"{key}=true, but code_tests would run model-written programs without "
                f"namespaces here, on the host's files and network (uid on the host: "
                f"{found['uid']}): {found['why_not']}. Fix: " + _FIX.format(key=key)
            )
    return problems
