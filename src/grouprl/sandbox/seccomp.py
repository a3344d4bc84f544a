"""The seccomp filter of a worker without network: no socket that could reach outside
its own network namespace, and no process outside its tree (Linux, x86_64 and aarch64).

::

    worker: enter_own_network() ── user+network namespace: TCP, UDP and abstract Unix
       │                            sockets are per network namespace, so they reach only
       │                            its own loopback (down)
       ▼
    load_worker_filter() ── seccomp filter, inherited by every thread and child (and
                            across exec; it cannot be removed):
        socket(AF_UNIX | AF_VSOCK | any family but INET, INET6, NETLINK, PACKET, ALG)  EPERM
        socketpair(AF_UNIX, SOCK_DGRAM)   EPERM (a datagram socket of a pair can still
                                          send to a path; a stream pair never connects on)
        io_uring_setup/enter/register     ENOSYS (io_uring creates sockets past seccomp)
        pidfd_getfd                       EPERM (copying a socket out of another process)
        clone(CLONE_PARENT)               EPERM (a child of the pool, outside the worker's
                                          tree: host/tree.py)
        clone3                            ENOSYS (its flags are in memory, which a filter
                                          cannot read; libc falls back to clone)
        32-bit (i386, arm) calls: socketcall, socket, socketpair  EPERM; the same clone,
        clone3, io_uring and pidfd_getfd rules; x32 calls, other arches: ENOSYS

A path-named Unix socket (``/var/run/docker.sock``, Ray's under its temp dir, a proxy's
under ``/tmp``) is a file: a network namespace does not hide it, so the filter refuses
the only way to reach it, a socket of family AF_UNIX (bound or connected, path or
abstract, made before or after the worker started), and AF_VSOCK (a VM's host, which no
network namespace encloses). What stays: the pipe to the pool (a stream socketpair
made before), stream socketpairs (``asyncio``'s self-pipe, ``multiprocessing.Pipe``),
pipes, files. What breaks: code that makes a Unix socket of its own
(``multiprocessing``'s ``forkserver`` start method, Python 3.14's default, and its
``Manager``; ``logging``'s ``SysLogHandler``): it gets ``PermissionError``.

Landlock (kernel 6.12+) scopes abstract sockets only; connecting to a path socket is no
Landlock right on the kernels this targets, and a mount namespace hiding socket files
misses sockets made later and paths through ``/proc/<pid>/root``: hence seccomp. Its
cost: ~50 BPF rows, built and loaded in ~0.3 ms per worker start, and a few ns per system
call.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct

from grouprl.host.namespaces import filter_support

__all__ = ["assemble", "load_worker_filter"]

AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, AF_PACKET, AF_ALG = 1, 2, 10, 16, 17, 38
ALLOWED_FAMILIES = (AF_INET, AF_INET6, AF_NETLINK, AF_PACKET, AF_ALG)
"""Families a worker without network may still create: each is per network namespace
(AF_ALG is the kernel's crypto, local)."""
SOCK_STREAM, SOCK_SEQPACKET = 1, 5

# BPF: instruction classes and fields (linux/filter.h, linux/seccomp.h)
_LD_W_ABS, _JEQ_K, _JGE_K, _AND_K, _RET_K = 0x20, 0x15, 0x35, 0x54, 0x06
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000
_NR, _ARCH, _ARG0, _ARG1 = 0, 4, 16, 24  # offsets in struct seccomp_data (little endian)
PR_SET_SECCOMP, SECCOMP_MODE_FILTER, PR_SET_NO_NEW_PRIVS = 22, 2, 38

# arch: (audit arch, its calls, compat audit arch, its calls); compat["refuse"]: EPERM
_ARCHES = {
    "x86_64": (
        0xC000003E,
        {"socket": 41, "socketpair": 53, "clone": 56},
        0x40000003,  # i386 (int 0x80)
        {"refuse": (102, 359, 360), "clone": 120},  # socketcall, socket, socketpair
    ),
    "aarch64": (
        0xC00000B7,
        {"socket": 198, "socketpair": 199, "clone": 220},
        0x40000028,  # arm (EABI)
        {"refuse": (281, 288), "clone": 120},  # socket, socketpair
    ),
}
IO_URING, PIDFD_GETFD, CLONE3 = (425, 426, 427), 438, 435  # the same on every arch
CLONE_PARENT = 0x00008000
_X32_BIT = 0x40000000


def load_worker_filter() -> str | None:
    """Load the filter into this process (call it while single-threaded: a thread
    started before keeps no filter); None when loaded, else why not. Where seccomp needs
    it (no CAP_SYS_ADMIN in the process's user namespace) no_new_privs is set first."""
    if (why := filter_support()) is not None:
        return why
    rows = assemble(_program(platform.machine()))
    code = ctypes.create_string_buffer(b"".join(struct.pack("<HBBI", *row) for row in rows))
    fprog = ctypes.create_string_buffer(struct.pack("@HP", len(rows), ctypes.addressof(code)))
    libc = ctypes.CDLL(None, use_errno=True)
    load = (PR_SET_SECCOMP, SECCOMP_MODE_FILTER, fprog, 0, 0)
    if libc.prctl(*load) == 0:
        return None
    err = ctypes.get_errno()
    if err == errno.EACCES and libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0:
        if libc.prctl(*load) == 0:
            return None
        err = ctypes.get_errno()
    return f"the kernel refused the seccomp filter ({errno.errorcode.get(err, err)})"


Row = tuple  # ("label", name) | ("ld", offset) | ("and", k) | ("ret", action)
# | ("jeq" | "jge", k, label if true | None (next row), label if false | None)


def _program(machine: str) -> list[Row]:
    """The filter for ``machine``, in rows with labels (``assemble`` lays them out)."""
    arch, nr, compat_arch, compat = _ARCHES[machine]
    return [
        ("ld", _ARCH),
        ("jeq", arch, "native", None),
        ("jeq", compat_arch, None, "enosys"),  # an arch neither native nor compat
        ("ld", _NR),
        *(("jeq", number, "eperm", None) for number in compat["refuse"]),
        ("jeq", compat["clone"], "clone", "shared"),
        ("label", "native"),
        ("ld", _NR),
        ("jge", _X32_BIT, "enosys", None),  # x32 (a flag bit on the syscall number)
        ("jeq", nr["socket"], "socket", None),
        ("jeq", nr["socketpair"], "socketpair", None),
        ("jeq", nr["clone"], "clone", None),
        ("label", "shared"),  # (the syscall number loaded)
        *(("jeq", number, "enosys", None) for number in (*IO_URING, CLONE3)),
        ("jeq", PIDFD_GETFD, "eperm", "allow"),
        ("label", "clone"),
        ("ld", _ARG0),
        ("and", CLONE_PARENT),
        ("jeq", 0, "allow", "eperm"),
        ("label", "socket"),
        ("ld", _ARG0),
        *(("jeq", family, "allow", None) for family in ALLOWED_FAMILIES),
        ("ret", _ERRNO | errno.EPERM),  # every other family
        ("label", "socketpair"),
        ("ld", _ARG0),
        ("jeq", AF_UNIX, None, "allow"),  # other families connect nowhere
        ("ld", _ARG1),
        ("and", 0xF),  # SOCK_TYPE_MASK: without SOCK_NONBLOCK, SOCK_CLOEXEC
        ("jeq", SOCK_STREAM, "allow", None),
        ("jeq", SOCK_SEQPACKET, "allow", None),
        ("label", "eperm"),
        ("ret", _ERRNO | errno.EPERM),
        ("label", "allow"),
        ("ret", _ALLOW),
        ("label", "enosys"),
        ("ret", _ERRNO | errno.ENOSYS),
    ]


def assemble(program: list[Row]) -> list[tuple[int, int, int, int]]:
    """Classic BPF rows ``(code, jt, jf, k)`` from ``program``: labels resolved to
    forward jumps counted from the next row (BPF jumps forward only)."""
    rows, at = [], {}  # at: the row each label names (the next one that is no label)
    for row in program:
        if row[0] == "label":
            at[row[1]] = len(rows)
        else:
            rows.append(row)
    out = []
    for i, row in enumerate(rows):
        op = row[0]
        if op in ("jeq", "jge"):
            jt, jf = (0 if to is None else at[to] - (i + 1) for to in row[2:4])
            assert 0 <= jt < 256 and 0 <= jf < 256, row  # forward, and fits a byte
            out.append((_JEQ_K if op == "jeq" else _JGE_K, jt, jf, row[1]))
        else:
            out.append(({"ld": _LD_W_ABS, "and": _AND_K, "ret": _RET_K}[op], 0, 0, row[1]))
    return out
