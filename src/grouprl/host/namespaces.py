"""Whether this machine lets a process enter a user and network namespace of its own
(``unshare(CLONE_NEWUSER | CLONE_NEWNET)`` as an unprivileged user) and then load a
seccomp filter (what keeps it off host Unix sockets: ``sandbox/seccomp.py``), tried once
in a child process. ``grouprl plan`` shows it; the sandbox's workers rely on it when a
pool is asked for no network (``sandbox/isolation.py``).
"""

from __future__ import annotations

import errno
import functools
import os
import platform
import subprocess
import sys

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000

OWN_NETWORK = "own user+network namespace"
"""Where a worker without network runs, where the kernel allows it."""

NO_HOST_SOCKETS = "no Unix or vsock sockets (seccomp)"
"""What else keeps a worker without network off the host, where the kernel allows it."""

_PROBE = (  # prints two errnos: unshare's, then loading a one-row (allow) seccomp filter's
    "import ctypes, struct, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    f"if libc.unshare({CLONE_NEWUSER | CLONE_NEWNET}) != 0:\n"
    "    sys.stdout.write(f'{ctypes.get_errno()} -1'); sys.exit()\n"
    "row = ctypes.create_string_buffer(struct.pack('<HBBI', 6, 0, 0, 0x7FFF0000))\n"
    "prog = struct.pack('@HP', 1, ctypes.addressof(row))\n"
    "done = libc.prctl(22, 2, ctypes.c_char_p(prog), 0, 0) == 0\n"
    "sys.stdout.write(f'0 {0 if done else ctypes.get_errno()}')\n"
)


@functools.cache
def _probe() -> tuple[int, int] | str:
    """``(unshare's errno, the seccomp filter's errno)`` from one child (0: done; the
    second is -1 where unshare failed), or why the child could not tell."""
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-S", "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        unshared, filtered = (int(x) for x in done.stdout.split())
    except (OSError, ValueError, subprocess.SubprocessError) as err:
        return f"could not try unshare(2) in a child process ({type(err).__name__})"
    return unshared, filtered


def network_isolation() -> tuple[bool, str]:
    """Whether a worker can be put in its own user+network namespace on this machine,
    and a one-line reason. Tried once per process, in a child (~20 ms)."""
    if not sys.platform.startswith("linux"):
        return False, f"network namespaces are Linux only (this is {sys.platform})"
    probed = _probe()
    if isinstance(probed, str):
        return False, probed
    if probed[0] == 0:
        return True, f"{OWN_NETWORK} per worker: unprivileged user namespaces are allowed"
    return False, refusal(probed[0])


def host_socket_isolation() -> tuple[bool, str]:
    """Whether a worker in its own network namespace can also be kept off the host's
    Unix (and vsock) sockets here, a seccomp filter (``sandbox/seccomp.py``), and why
    not. False wherever ``network_isolation`` is."""
    allowed, why = network_isolation()
    if not allowed:
        return False, why
    if (why := filter_support()) is not None:
        return False, why
    probed = _probe()
    assert not isinstance(probed, str)  # network_isolation read it
    if probed[1] != 0:
        name = errno.errorcode.get(probed[1], str(probed[1]))
        return (
            False,
            f"the kernel refused a seccomp filter ({name}): host Unix sockets stay reachable",
        )
    return True, f"{NO_HOST_SOCKETS}: path-named and abstract Unix sockets unreachable"


def filter_support() -> str | None:
    """None where ``sandbox/seccomp.py`` has a filter for this machine (Linux on x86_64
    or aarch64), else why not, in a phrase."""
    if not sys.platform.startswith("linux"):
        return f"seccomp is Linux only (this is {sys.platform})"
    if platform.machine() not in ("x86_64", "aarch64"):
        return f"no socket filter for {platform.machine()} (x86_64, aarch64 only)"
    return None


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
