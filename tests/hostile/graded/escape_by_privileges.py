"""Tries what needs privileges: mount a tmpfs, chroot, remount /usr writable, raise its
hard limits (CPU, files, processes), run at real-time or higher priority, set the
hostname, load a kernel module, and make a user namespace of its own (where it would be
root of its own mounts: a tmpfs there is memory no reading counts); where that were
allowed, mount sysfs, a writable /proc and remount /usr writable from there. Every one
of those fails, so it prints the right answer: passed."""

# problem: stdio
# outcome: passed
# needs: namespaces
import ctypes
import os
import resource

libc = ctypes.CDLL(None, use_errno=True)
MS_REMOUNT, MS_BIND = 32, 4096
escaped = []


def attempt(name, ok):
    if ok:
        escaped.append(name)


def mounts():
    attempt("tmpfs", libc.mount(b"tmpfs", b"/sandbox", b"tmpfs", 0, None) == 0)
    attempt("usr rw", libc.mount(None, b"/usr", None, MS_REMOUNT | MS_BIND, None) == 0)
    attempt("sysfs", libc.mount(b"sysfs", b"/sandbox", b"sysfs", 0, None) == 0)
    attempt("proc rw", libc.mount(b"proc", b"/sandbox", b"proc", 0, None) == 0)


mounts()
attempt("chroot", libc.chroot(b"/usr") == 0)
attempt("hostname", libc.sethostname(b"owned", 5) == 0)
attempt("init_module", libc.syscall(175, None, 0, b"") == 0)
try:  # real-time scheduling (a loop at SCHED_FIFO holds a core), a higher priority
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    attempt("SCHED_FIFO", True)
except OSError:
    pass
try:
    os.nice(-5)
    attempt("nice -5", True)
except OSError:
    pass
for which in (resource.RLIMIT_CPU, resource.RLIMIT_NOFILE, resource.RLIMIT_NPROC):
    soft, hard = resource.getrlimit(which)
    try:
        resource.setrlimit(which, (soft, resource.RLIM_INFINITY))
        attempt(f"rlimit {which}", hard != resource.RLIM_INFINITY)
    except (ValueError, OSError):
        pass
if libc.unshare(0x10000000 | 0x00020000) == 0:  # a user and mount namespace of its own
    escaped.append("user namespace")
    mounts()
a, b = map(int, input().split())
print(escaped or a + b)
print(a * b)
