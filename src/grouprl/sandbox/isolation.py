"""A worker without network: its own user and network namespace (Linux).

::

    WorkerPool(network=False) ──► worker: serve() ── unshare(CLONE_NEWUSER | CLONE_NEWNET)
                                        │  first, while it has one thread (the kernel
                                        │  refuses a threaded process)
                                        ▼
                      a network namespace of its own: one loopback device, down, so
                      connect() to any address fails (ENETUNREACH); the pipe to the
                      parent, open before, works on. Its uid and gid map to themselves:
                      files and os.getuid() look as before.

Unprivileged user namespaces are needed (``unshare -rn true`` succeeds as the user). Where
the kernel refuses them, the worker keeps the network: ``network_isolation()`` says so,
the pool logs it, the run warns at start and ``grouprl plan`` shows why.
"""

from __future__ import annotations

import ctypes
import os
import sys

from grouprl.plan.namespaces import (  # the probe sits below the sandbox: plan reads it too
    CLONE_NEWNET,
    CLONE_NEWUSER,
    OWN_NETWORK,
    network_isolation,
    refusal,
)

__all__ = ["containment", "enter_own_network", "network_isolation", "refusal"]


def enter_own_network() -> str | None:
    """Move this (single-threaded) process into a new user and network namespace; None
    when done, else why not (the process then keeps the network)."""
    if not sys.platform.startswith("linux"):
        return f"network namespaces are Linux only (this is {sys.platform})"
    uid, gid = os.getuid(), os.getgid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
        return refusal(ctypes.get_errno())
    maps = (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1"))
    for name, text in maps:
        try:
            with open(f"/proc/self/{name}", "w") as file:
                file.write(text)
        except OSError:
            break  # unmapped ids read as 65534 ("nobody"); the namespace holds all the same
    return None


def containment(*, network: bool, memory_mb: int | None, memory_limit: str) -> tuple[str, bool]:
    """What a pool's workers are held to, in a phrase ("no network (own user+network
    namespace), rss limit 4096 MB, ..."), and whether ``network=False`` cannot be kept
    on this machine (the caller warns)."""
    refused = False
    if network:
        net = "network allowed"
    else:
        allowed, why = network_isolation()
        refused = not allowed
        net = f"no network ({OWN_NETWORK})" if allowed else f"network ON though off: {why}"
    memory = "no memory limit" if memory_mb is None else f"{memory_limit} limit {memory_mb} MB"
    return f"{net}, {memory}, each worker killed with all its processes", refused
