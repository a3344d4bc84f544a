"""Whether this machine lets a process enter a user and network namespace of its own
(``unshare(CLONE_NEWUSER | CLONE_NEWNET)`` as an unprivileged user), tried once in a child
process. ``grouprl plan`` shows it; the sandbox's workers rely on it when a pool is asked
for no network (``sandbox/isolation.py``, which re-exports ``network_isolation``).
"""

from __future__ import annotations

import errno
import functools
import os
import subprocess
import sys

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000

OWN_NETWORK = "own user+network namespace"
"""Where a worker without network runs, where the kernel allows it."""

_PROBE = (
    "import ctypes, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    f"sys.stdout.write(str(0 if libc.unshare({CLONE_NEWUSER | CLONE_NEWNET}) == 0 "
    "else ctypes.get_errno()))\n"
)


@functools.cache
def network_isolation() -> tuple[bool, str]:
    """Whether a worker can be put in its own user+network namespace on this machine,
    and a one-line reason. Tried once per process, in a child (~20 ms)."""
    if not sys.platform.startswith("linux"):
        return False, f"network namespaces are Linux only (this is {sys.platform})"
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-S", "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        code = int(done.stdout.strip())
    except (OSError, ValueError, subprocess.SubprocessError) as err:
        return False, f"could not try unshare(2) in a child process ({type(err).__name__})"
    if code == 0:
        return True, f"{OWN_NETWORK} per worker: unprivileged user namespaces are allowed"
    return False, refusal(code)


def refusal(code: int) -> str:
    """Why unshare(CLONE_NEWUSER | CLONE_NEWNET) failed with errno ``code``, in a line."""
    why = {
        errno.EPERM: "the kernel refuses unprivileged user namespaces (sysctl "
        "kernel.unprivileged_userns_clone=0 or kernel.apparmor_restrict_unprivileged_userns"
        "=1, or a container's seccomp profile)",
        errno.ENOSPC: "user.max_user_namespaces is 0 or used up",
        errno.EINVAL: "this kernel lacks user or network namespaces (or the process has threads)",
        errno.ENOSYS: "this kernel has no unshare(2)",
    }.get(code, os.strerror(code))
    return f"unshare(CLONE_NEWUSER|CLONE_NEWNET) failed: {why}; workers keep the network"
