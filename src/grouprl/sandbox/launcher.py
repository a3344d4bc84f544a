"""The process between ``run_program`` and a generated program: it encloses, limits and
starts the program, then reports how it ended. Run as ``python -I -S launcher.py SPEC FD``
(standalone: the standard library only, so that it starts fast and imports nothing of the
repo); SPEC is the marshalled dict ``run_program`` wrote, FD the write end of the status
pipe.

::

    run_program ── launcher (own session; host root switches to nobody)
                     │ unshare(user, mount, network, pid, ipc, uts): uid 1000 inside
                     ▼
                   init (pid 1 of the new pid namespace)
                     │ a new root: tmpfs, read-only binds of /usr and the interpreter's
                     │ prefix, /dev/{null,zero,random,urandom}, its own read-only /proc,
                     │ the program's files on a size-limited tmpfs at /sandbox (the only
                     │ writable place)
                     ▼
                   program (pid 2; rlimits; no capabilities, no new privileges)

init reaps every orphan and, when the program ends, writes ``exit N`` or ``signal N`` on
the status pipe and exits: the kernel then kills whatever the program left in the pid
namespace. init sets ``user.max_user_namespaces`` to 0 in the program's user namespace
(the program cannot make one of its own, where it would hold capabilities over mounts of
its own) and, once the program is started, holds none of its descriptors but the status
pipe (which the program, holding no capabilities, cannot open through /proc/1/fd: init
holds all of its namespace's). The stdin file is unlinked once open: no path leads to
it. Where the namespaces are not asked for (``run_program``'s probe found them
refused), the launcher itself is the parent (a child subreaper, so that orphans come back
to it), runs the program in the host filesystem in its private directory, and kills what
is left when it ends.

The status pipe carries lines: ``layers <repr of a dict>`` first (what is active: bools
and strings), then one of ``exit N``, ``signal N``, ``error <what failed to set up>``.
"""

from __future__ import annotations

import _signal as signal  # type: ignore[import-not-found]  # the C module: ``signal`` imports enum, ~1/4 of the start-up
import ctypes
import marshal
import os
import resource
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME, MS_STRICTATIME = 1024, 2048, 1 << 21, 1 << 24
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 4, 36, 38
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "ppc64le": 203, "s390x": 217, "riscv64": 41}
INNER_ID = 1000
"""The program's uid and gid inside its user namespace (not 0: it holds no capabilities)."""
NOBODY = 65534
"""The host uid and gid a launcher started as root runs the program as."""
DEVICES = ("null", "zero", "random", "urandom")
REFUSALS = {
    1: "the kernel refuses unprivileged user namespaces (sysctl "
    "kernel.unprivileged_userns_clone=0 or kernel.apparmor_restrict_unprivileged_userns=1, "
    "or a container's seccomp profile)",
    28: "user.max_user_namespaces (or another max_*_namespaces sysctl) is 0 or used up",
    22: "this kernel lacks one of these namespaces",
}
"""Why unshare(2) failed, by errno (EPERM, ENOSPC, EINVAL), for ``isolation()``."""
OVERDUE_S = 5
"""Seconds past wall_s after which the launcher stops waiting on its own."""
ROOT = "/tmp"
"""Where the program's root is built, in the launcher's own mount namespace (the host's
/tmp stays as it is)."""

_libc = ctypes.CDLL(None, use_errno=True)


def main(spec_path: str, status_fd: int) -> None:
    with open(spec_path, "rb") as file:
        spec = marshal.load(file)  # (json imports re and enum: slower to start)
    status = os.fdopen(status_fd, "w", buffering=1)
    os.set_inheritable(status_fd, False)  # the program never sees it
    stdin_fd = os.open(spec["stdin"], os.O_RDONLY)
    os.unlink(spec["stdin"])  # (it may hold a harness's secrets: no path to it is left)
    spec["parent"] = os.getppid()
    layers: dict[str, object] = {}
    try:
        if spec["namespaces"]:
            _enclosed(spec, status, stdin_fd, layers)
        else:
            layers["why_not"] = "namespaces not asked for"
            _plain(spec, status, stdin_fd, layers)
    except BaseException as err:  # every failure of setup is reported
        status.write(f"error {type(err).__name__}: {err}\n")
        os._exit(1)


def _enclosed(spec: dict, status, stdin_fd: int, layers: dict) -> None:
    """Read the program's files while the host is visible; build its root (as host root
    in a mount namespace of its own, where this process may: then it leaves root); enter
    new user, mount, network, pid, ipc and uts namespaces; hand over to init (``_init``).
    Where the kernel refuses them this fails: ``run_program``'s probe then turns them off
    for the process (``_plain``)."""
    files = _read_tree(spec["work"])
    staged = _libc.unshare(CLONE_NEWNS) == 0  # host root (or root of an enclosing user ns)
    if staged:
        _build_root(spec, files)
    layers["uid"] = _leave_root()
    _die_with_parent(spec["parent"])
    uid, gid = os.geteuid(), os.getegid()
    flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS
    if _libc.unshare(flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare(user|mount|net|pid|ipc|uts): {REFUSALS.get(err, '')}")
    for name, text in (
        ("setgroups", "deny"),
        ("uid_map", f"{INNER_ID} {uid} 1"),
        ("gid_map", f"{INNER_ID} {gid} 1"),
    ):
        with open(f"/proc/self/{name}", "w") as file:
            file.write(text)
    layers.update(user_ns=True, net_ns=True, pid_ns=True, ipc_ns=True, uts_ns=True)
    init = os.fork()
    if init == 0:
        try:
            _init(spec, status, stdin_fd, layers, files, staged=staged)
        except BaseException as err:  # every failure of setup is reported
            status.write(f"error {type(err).__name__}: {err}\n")
            os._exit(1)
    os.close(stdin_fd)
    _wait_quietly(init)


def _build_root(spec: dict, files: dict[str, bytes]) -> None:
    """The program's filesystem, on a tmpfs at ``ROOT``: read-only binds of what the
    interpreter needs, four devices, an empty /proc to mount on, and /sandbox (a tmpfs
    of ``disk_mb``, the one writable place, holding the program's files)."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing propagates back to the host
    _mount("tmpfs", ROOT, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
    for path in spec["links"]:
        if os.path.islink(path):
            os.makedirs(os.path.dirname(ROOT + path), exist_ok=True)
            os.symlink(os.readlink(path), ROOT + path)
    for path in spec["binds"]:
        if os.path.exists(path) and not os.path.islink(path):
            _bind(path, ROOT + path, read_only=True, device=False)
    os.makedirs(ROOT + "/dev")
    for name in DEVICES:
        _bind(f"/dev/{name}", f"{ROOT}/dev/{name}", read_only=False, device=True)
    for fd_name, fd_number in (("stdin", 0), ("stdout", 1), ("stderr", 2)):
        os.symlink(f"/proc/self/fd/{fd_number}", f"{ROOT}/dev/{fd_name}")
    os.symlink("/proc/self/fd", f"{ROOT}/dev/fd")
    os.makedirs(ROOT + "/proc")
    os.symlink("/sandbox", ROOT + "/tmp")
    work = ROOT + "/sandbox"
    os.makedirs(work)
    size = f"size={spec['disk_mb']}m,nr_inodes=4096,mode=0777"
    _mount("tmpfs", work, "tmpfs", MS_NOSUID | MS_NODEV, size)
    try:
        _write_tree(work, files)
    except OSError as err:
        raise OSError(
            err.errno,
            f"the files given do not fit /sandbox ({spec['disk_mb']} MB, 4096 files: "
            f"max(64, 4 x ProgramLimits.file_mb) MB): {err.strerror}",
        ) from err
    _mount(None, ROOT, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _init(spec, status, stdin_fd, layers, files, *, staged: bool) -> None:
    """pid 1 of the new namespaces: its /proc, the new root, the program; reap until the
    program ends."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the launcher killed: so is the namespace
    layers["nested_user_ns"] = _forbid_nested_user_namespaces()
    if not staged:
        _build_root(spec, files)
    _mount(ROOT, ROOT, None, MS_BIND | MS_REC)  # a mount of this namespace: pivot_root
    # refuses one inherited from a more privileged namespace (locked)
    try:  # read-only: no /proc/sys, no /proc/sysrq-trigger, even for a program whose uid
        # is host root's (inside a root worker's user namespace, which maps only uid 0)
        _mount("proc", ROOT + "/proc", "proc", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
        layers["proc"] = True
    except OSError as err:
        layers["proc"] = f"no /proc: {err}"  # Python runs without it
    os.chdir(ROOT)
    _ok(_libc.syscall(SYS_PIVOT_ROOT[os.uname().machine], b".", b"."), "pivot_root")
    _ok(_libc.umount2(b".", MNT_DETACH), "umount .")  # the host's root, stacked on the new one
    os.chdir("/")
    layers["mount_ns"] = True
    _libc.sethostname(b"sandbox", 7)
    status.write(f"layers {layers!r}\n")
    # RLIMIT_NPROC counts the tasks of uid 1000 in this user namespace alone: the
    # launcher, init, the program and what it starts
    spec["nproc"] = spec["limits"]["processes"] + 3
    program = os.fork()
    if program == 0:
        _exec(spec, status, stdin_fd, cwd="/sandbox")
    _hold_nothing_of_the_program(stdin_fd)
    _reap_until(program, status, spec["wall_s"])
    os._exit(0)  # the kernel kills what is left in the namespace


def _forbid_nested_user_namespaces() -> str:
    """``user.max_user_namespaces`` = 0 in the program's user namespace (a limit of each
    namespace, which init, holding its capabilities, may set): the program cannot make a
    user namespace of its own, where it would be root of a mount namespace and could mount
    an unbounded tmpfs (memory no Pss reading counts). "forbidden" when set, else
    "allowed: <why not>"."""
    try:
        with open("/proc/sys/user/max_user_namespaces", "w") as file:
            file.write("0")
    except OSError as err:
        return f"allowed: {err.strerror}"
    return "forbidden"


def _plain(spec: dict, status, stdin_fd: int, layers: dict) -> None:
    """No namespaces: the program runs in the host filesystem, in its directory; this
    process adopts its orphans (child subreaper) and kills them when it ends."""
    layers["uid"] = _leave_root()
    _prctl(PR_SET_DUMPABLE, 0)  # the program (same uid, parent's pid visible) may not
    # open this process's descriptors: the status pipe, its stdout
    _die_with_parent(spec["parent"])
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    status.write(f"layers {layers!r}\n")
    program = os.fork()
    if program == 0:
        _prctl(PR_SET_DUMPABLE, 1)  # (exec sets it anyway, for a non-setuid program)
        _exec(spec, status, stdin_fd, cwd=spec["work"])
    _hold_nothing_of_the_program(stdin_fd)
    _reap_until(program, status, spec["wall_s"])
    for _ in range(100):  # what the program left: killed, reaped, until none is left
        left = _children()
        if not left:
            break
        for pid in left:
            _kill(pid)
        _reap_all()


def _exec(spec: dict, status, stdin_fd: int, *, cwd: str) -> None:
    """In the program's process: limits, no new privileges, its stdin; then exec."""
    try:
        os.umask(0o022)
        os.chdir(cwd)
        os.dup2(stdin_fd, 0)
        limits = spec["limits"]
        mb = 1024 * 1024
        for which, value in (
            (resource.RLIMIT_CPU, (limits["cpu_s"], limits["cpu_s"] + 1)),
            (resource.RLIMIT_AS, (limits["address_mb"] * mb,) * 2),
            (resource.RLIMIT_FSIZE, (limits["file_mb"] * mb,) * 2),
            (resource.RLIMIT_NOFILE, (limits["open_files"],) * 2),
            (resource.RLIMIT_CORE, (0, 0)),
            (resource.RLIMIT_RTPRIO, (0, 0)),  # no real-time scheduling: a SCHED_FIFO
            (resource.RLIMIT_NICE, (0, 0)),  # loop would hold a core; no higher priority
        ):
            resource.setrlimit(which, value)
        if spec.get("nproc") is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (spec["nproc"],) * 2)
        _prctl(PR_SET_NO_NEW_PRIVS, 1)
        os.execvpe(spec["argv"][0], spec["argv"], spec["env"])  # PATH: the program's
    except BaseException as err:  # reported, then this process ends
        hint = ""
        if isinstance(err, PermissionError) and os.geteuid() == NOBODY and not spec["namespaces"]:
            hint = (
                " (without namespaces host root runs programs as nobody, who cannot reach"
                " it: install the interpreter where every user can read it, or allow user"
                " namespaces)"
            )
        status.write(f"error could not start {spec['argv'][0]!r}: {err}{hint}\n")
        os._exit(127)


def _hold_nothing_of_the_program(stdin_fd: int) -> None:
    """In the program's parent after the fork: its stdin closed, and this process's own
    stdout and stderr (the pipes the caller reads the program's output from) on
    /dev/null, so that only the program's processes hold them."""
    os.close(stdin_fd)
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)


class _Overdue(Exception):
    """The program outlived its wall time by far: its caller, which kills it at the
    deadline, must be gone (a backstop: the launcher also dies with its parent)."""


def _overdue(*_) -> None:
    raise _Overdue


def _reap_until(program: int, status, wall_s: float) -> None:
    """Reap children (orphans included) until ``program`` ends; report how it ended.
    Gives up ``OVERDUE_S`` past the wall time (the caller then kills what is left)."""
    signal.signal(signal.SIGALRM, _overdue)
    signal.alarm(int(wall_s) + OVERDUE_S)
    while True:
        try:
            pid, code = os.wait()
        except ChildProcessError:
            return
        except _Overdue:
            status.write(f"error still running {OVERDUE_S} s past wall_s: its caller is gone\n")
            return
        if pid == program:
            if os.WIFSIGNALED(code):
                status.write(f"signal {os.WTERMSIG(code)}\n")
            else:
                status.write(f"exit {os.WEXITSTATUS(code)}\n")
            return


def _die_with_parent(parent: int) -> None:
    """SIGKILL this process when its parent (run_program's thread) ends: set after the
    change of uid, which clears it; a parent gone already ends it now."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)


def _leave_root() -> str:
    """Run as nobody where this process is host root, so host root's files stay closed."""
    if os.geteuid() != 0:
        return f"own uid {os.geteuid()}"
    try:
        os.setgroups([])
        os.setresgid(NOBODY, NOBODY, NOBODY)
        os.setresuid(NOBODY, NOBODY, NOBODY)
    except OSError as err:  # e.g. inside a user namespace that maps only uid 0
        return f"root: could not switch to nobody ({err})"
    _prctl(PR_SET_DUMPABLE, 1)  # a change of uid clears it: /proc/self would stay root's
    return f"nobody ({NOBODY}) instead of root"


def _read_tree(top: str) -> dict[str, bytes]:
    files = {}
    for folder, _, names in os.walk(top):
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as file:
                files[os.path.relpath(path, top)] = file.read()
    return files


def _write_tree(top: str, files: dict[str, bytes]) -> None:
    """Write ``files`` open to everyone: only the program's uid runs in the namespace,
    and host root writes them where it builds the root."""
    for rel, data in files.items():
        path = os.path.join(top, rel)
        os.makedirs(os.path.dirname(path), mode=0o777, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        os.chmod(path, 0o666)


def _bind(source: str, target: str, *, read_only: bool, device: bool) -> None:
    """Bind ``source`` onto ``target``, then remount it nosuid (and read-only, nodev where
    asked), keeping the flags the kernel locks (a remount may not clear them)."""
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        open(target, "w").close()
    _mount(source, target, None, MS_BIND | MS_REC)
    locked = 0
    st = os.statvfs(target).f_flag
    for st_bit, ms_bit in ((1, MS_RDONLY), (2, MS_NOSUID), (4, MS_NODEV), (8, MS_NOEXEC)):
        locked |= ms_bit if st & st_bit else 0
    for st_bit, ms_bit in ((1024, MS_NOATIME), (2048, MS_NODIRATIME), (4096, MS_RELATIME)):
        locked |= ms_bit if st & st_bit else 0
    flags = locked | MS_BIND | MS_REMOUNT | MS_NOSUID | (MS_RDONLY if read_only else 0)
    flags |= 0 if device else MS_NODEV
    _mount(None, target, None, flags)


def _mount(source, target, fstype, flags, data=None) -> None:
    enc = lambda s: None if s is None else s.encode()
    done = _libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data))
    _ok(done, f"mount {source} on {target}")


def _ok(result: int, what: str) -> None:
    """Raise ``OSError`` with the errno and its words where a libc call returned non-zero."""
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _prctl(option: int, value: int) -> None:
    """``prctl(option, value)`` on Linux; elsewhere nothing (there is no such call)."""
    if hasattr(_libc, "prctl"):
        _libc.prctl(option, value, 0, 0, 0)


def _children() -> list[int]:
    """This process's children, from /proc (Linux); elsewhere none are known."""
    if not os.path.isdir("/proc/self/task"):
        return []
    pids = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as file:
                pids += [int(p) for p in file.read().split()]
        except OSError:
            continue
    return pids


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        return  # gone already


def _reap_all() -> None:
    while True:
        try:
            if os.waitpid(-1, 0)[0] == 0:
                return
        except ChildProcessError:
            return


def _wait_quietly(pid: int) -> None:
    while True:
        try:
            os.waitpid(pid, 0)
            return
        except ChildProcessError:
            return
        except InterruptedError:
            continue


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
