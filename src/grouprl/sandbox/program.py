"""Run a generated program (a completion's code) in a sandbox: a fresh process tree in
a private directory, in new user, mount, network and pid namespaces where the kernel
allows them, within limits on wall time, CPU, memory, processes, files and output.

::

    run_program(argv, files=..., limits=...)          (any thread; blocks until done)
      │ a private temp dir: files, stdin, the launcher's spec (marshal)
      ├──► launcher (own session) ── init (pid 1) ── program (pid 2) ── its children
      │      sandbox/launcher.py: namespaces, the new root, rlimits; see its docstring
      │◄── stdout, stderr (read as they come; past output_bytes: killed)
      │◄── status pipe: "layers {...}", then "exit N" | "signal N" | "error ..."
      │ every 0.1 s: memory (Pss), CPU, processes of the tree in /proc (sandbox/watch.py)
      ▼ at the deadline, or any kill: the launcher's whole tree frozen and killed
    ProgramResult(outcome, exit_code, signal, stdout, stderr, wall_s, cpu_s, detail)

Nothing the program does makes ``run_program`` raise; it returns after every process the
program started is gone and its directory is removed. ``isolation()`` says which layers
this machine allows. docs/code.md has what is and is not isolated, and the cost.
"""

from __future__ import annotations

import functools
import marshal
import math
import os
import signal
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from grouprl.sandbox.watch import Outcome, Watched, watch

if TYPE_CHECKING:
    from grouprl.config.reward import RewardFunction

__all__ = [
    "PYTHON",
    "ProgramLimits",
    "ProgramResult",
    "isolation",
    "program_sandbox_line",
    "run_program",
]

PYTHON: str = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
"""The interpreter programs run with: the base interpreter of this one (a virtual
environment's would read its pyvenv.cfg and site-packages: the repo), at the same path
inside the sandbox, where its prefix is bound read-only."""

LAUNCHER = str(Path(__file__).with_name("launcher.py"))
_ADDRESS_SLACK_MB = 1024
"""RLIMIT_AS per process is memory_mb plus this: a backstop that fails a huge allocation
at once (Python's MemoryError), above the resident-memory watchdog, which does the
limiting (address space counts reserved, untouched memory: thread stacks, arenas)."""


@dataclass(frozen=True)
class ProgramLimits:
    """What one program run may use. Processes, memory and CPU count the whole tree."""

    wall_s: float = 10.0
    """Killed with all its descendants past it (outcome ``timeout``)."""
    cpu_s: float = 10.0
    """CPU seconds: RLIMIT_CPU per process (SIGXCPU), and the tree's sum, read every
    0.1 s (killed, reported as ``signaled`` SIGXCPU)."""
    memory_mb: int = 512
    """Memory of the program's processes together (proportional resident memory, Pss:
    forked copies' shared pages count once; and the in-memory files, memfd, they hold
    open), read every 0.1 s (killed: ``memory``); an allocation past memory_mb + 1 GiB of
    address space fails at once (MemoryError)."""
    processes: int = 32
    """Processes and threads it may create (RLIMIT_NPROC of its own uid in its own user
    namespace; without one, the watchdog counts processes)."""
    open_files: int = 64
    """Open file descriptors per process (RLIMIT_NOFILE)."""
    file_mb: int = 16
    """Largest file it may write (RLIMIT_FSIZE); the sandbox dir holds at most
    4 x file_mb (at least 64 MB) in all, in memory."""
    output_bytes: int = 1 << 20
    """stdout, and separately stderr, kept up to this; past it the program is killed
    (outcome ``output_limit``)."""

    def __post_init__(self) -> None:
        for name in ("wall_s", "cpu_s", "memory_mb", "processes", "open_files", "file_mb"):
            value = vars(self)[name]
            if not value > 0:
                raise ValueError(f"ProgramLimits.{name}={value!r}: give a positive number")
        if self.output_bytes < 0:
            raise ValueError(
                f"ProgramLimits.output_bytes={self.output_bytes!r}: give 0 or more bytes"
            )


@dataclass(frozen=True)
class ProgramResult:
    """How one run ended. ``exit_code`` is set with "exited" (and "memory" where the
    program exited on a MemoryError); ``signal`` with "signaled" (SIGXCPU: cpu_s)."""

    outcome: Outcome
    exit_code: int | None = None
    signal: int | None = None
    stdout: bytes = b""
    stderr: bytes = b""
    wall_s: float = 0.0
    cpu_s: float = 0.0
    detail: str = ""


def run_program(
    argv: Sequence[str],
    *,
    files: Mapping[str, str | bytes],
    stdin: bytes = b"",
    limits: ProgramLimits = ProgramLimits(),  # (frozen: shared safely)
    env: Mapping[str, str] | None = None,
) -> ProgramResult:
    """Run ``argv`` with cwd a fresh private directory holding ``files`` (relative paths),
    ``stdin`` on its standard input, within ``limits``; ``env`` is its whole environment
    (default: PATH, HOME and TMPDIR pointing into the sandbox, LANG=C.UTF-8,
    PYTHONDONTWRITEBYTECODE). Never raises for anything the program does."""
    start = time.monotonic()
    namespaces = _layers().get("mount_ns") is True
    with tempfile.TemporaryDirectory(prefix="grouprl-program-") as tmp:
        try:
            spec_path = _prepare(tmp, argv, files, stdin, limits, env, namespaces=namespaces)
        except (OSError, ValueError) as err:
            return _error(f"could not prepare the sandbox dir: {err}", start)
        return _supervise(spec_path, limits, start)[0]


def _prepare(
    tmp: str,
    argv: Sequence[str],
    files: Mapping[str, str | bytes],
    stdin: bytes,
    limits: ProgramLimits,
    env: Mapping[str, str] | None,
    *,
    namespaces: bool,
) -> str:
    """Write the program's files, its stdin and the launcher's spec into ``tmp``; the
    spec's path. Raises ValueError for a file key that leaves the directory."""
    work = os.path.join(tmp, "work")
    os.mkdir(work)
    for rel, content in files.items():
        path = os.path.normpath(os.path.join(work, rel))
        if os.path.isabs(rel) or not path.startswith(work + os.sep):
            raise ValueError(f"files key {rel!r} leaves the sandbox dir: give a relative path")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as file:
            file.write(content.encode() if isinstance(content, str) else content)
    Path(tmp, "stdin").write_bytes(stdin)
    if not namespaces and os.geteuid() == 0:  # nobody runs it, in the host's filesystem
        for folder, dirs, names in os.walk(work):
            for name in (folder, *(os.path.join(folder, n) for n in dirs + names)):
                os.chmod(name, 0o777 if os.path.isdir(name) else 0o666)
        os.chmod(tmp, 0o755)
    cwd = "/sandbox" if namespaces else work
    spec = {
        "argv": [os.fspath(arg) for arg in argv],
        "env": dict(env) if env is not None else _default_env(cwd),
        "work": work,
        "stdin": os.path.join(tmp, "stdin"),
        "namespaces": namespaces,
        "binds": _binds(),
        "links": ["/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc/localtime"],
        "disk_mb": max(64, 4 * limits.file_mb),
        "wall_s": limits.wall_s,
        "limits": {
            "cpu_s": max(1, math.ceil(limits.cpu_s)),
            "address_mb": limits.memory_mb + _ADDRESS_SLACK_MB,
            "file_mb": limits.file_mb,
            "open_files": limits.open_files,
            "processes": limits.processes,
        },
    }
    spec_path = os.path.join(tmp, "spec.marshal")  # (the launcher starts faster without json)
    Path(spec_path).write_bytes(marshal.dumps(spec))
    return spec_path


def _default_env(cwd: str) -> dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": cwd,
        "TMPDIR": cwd,
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def _binds() -> list[str]:
    """What the program sees, read-only: /usr, the interpreter's prefix (where it is not
    under /usr) and the dynamic linker's cache. Not /etc, /home, /root, /tmp, the repo."""
    prefix = os.path.realpath(sys.base_prefix)
    binds = ["/usr", "/etc/ld.so.cache"]
    if prefix != "/usr" and not prefix.startswith("/usr/"):
        binds.append(prefix)
    return binds


def _supervise(spec_path: str, limits: ProgramLimits, start: float) -> tuple[ProgramResult, dict]:
    """Run the launcher on ``spec_path`` under watch; the result and the layers it
    reported."""
    try:
        run = watch(LAUNCHER, spec_path, limits, start)
    except OSError as err:
        return _error(f"could not start the launcher: {err}", start), {}
    return _result(run, limits, start), run.layers()


def _result(run: Watched, limits: ProgramLimits, start: float) -> ProgramResult:
    """What the watch saw, as a ``ProgramResult``: a kill by the watch first, then the
    launcher's report (an ``error`` line wins: the program never holds that pipe)."""
    wall_s = time.monotonic() - start
    made = functools.partial(
        ProgramResult, stdout=run.stdout, stderr=run.stderr, wall_s=wall_s, cpu_s=run.cpu_s
    )
    if run.killed is not None:
        outcome, why, sig = run.killed
        return made(outcome=outcome, signal=sig, detail=why)
    ended = [line for line in run.lines() if not line.startswith("layers ")]
    errors = [line for line in ended if line.startswith("error ")]  # (the program cannot
    last = (errors or ended or [""])[-1]  # write on the status pipe: it never holds it)
    kind, _, value = last.partition(" ")
    if kind == "exit":
        code = int(value)
        if code != 0 and b"MemoryError" in run.stderr[-4096:]:
            why = f"MemoryError: address space past memory_mb={limits.memory_mb} + 1024"
            return made(outcome="memory", exit_code=code, detail=why)
        return made(outcome="exited", exit_code=code)
    if kind == "signal":
        sig = int(value)
        why = _signal_words(sig, limits)
        return made(outcome="signaled", signal=sig, detail=why)
    why = value if kind == "error" else "the launcher ended without a report"
    return made(outcome="sandbox_error", detail=why)


def _signal_words(sig: int, limits: ProgramLimits) -> str:
    """The signal's name, and the limit behind it where one is."""
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = f"signal {sig}"
    if sig == signal.SIGXCPU:
        return f"{name}: past cpu_s={limits.cpu_s} CPU seconds"
    if sig == signal.SIGXFSZ:
        return f"{name}: a file past file_mb={limits.file_mb}"
    return name


def _error(why: str, start: float) -> ProgramResult:
    """A ``sandbox_error``: the sandbox could not be set up (``why``)."""
    return ProgramResult("sandbox_error", wall_s=time.monotonic() - start, detail=why)


@functools.cache
def _layers() -> dict:
    """What the launcher sets up on this machine, from one probe run of the interpreter
    with namespaces asked for (~0.1 s, once per process): ``mount_ns`` True where the
    whole enclosure works, else ``why_not``."""
    if not sys.platform.startswith("linux"):
        return {"why_not": f"namespaces are Linux only (this is {sys.platform})"}
    probe = ProgramLimits(wall_s=30)
    with tempfile.TemporaryDirectory(prefix="grouprl-probe-") as tmp:
        os.mkdir(os.path.join(tmp, "enclosed"))
        argv = [PYTHON, "-I", "-S", "-c", "import os; print(os.getpid())"]
        spec_path = _prepare(
            os.path.join(tmp, "enclosed"), argv, {}, b"", probe, None, namespaces=True
        )
        result, layers = _supervise(spec_path, probe, time.monotonic())
        if result.outcome == "exited" and result.stdout.strip() == b"2":
            return layers
        why = result.detail or result.stderr.decode(errors="replace").strip()[-300:]
        spec_path = _prepare(tmp, argv, {}, b"", probe, None, namespaces=False)
        plain = _supervise(spec_path, probe, time.monotonic())[1]
    return {"uid": plain.get("uid", ""), "why_not": why}


def isolation() -> dict[str, bool | str]:
    """Which layers enclose programs on this machine: ``user_ns``, ``mount_ns``,
    ``net_ns``, ``pid_ns`` (bools), ``uid`` (who the program is on the host), ``why_not``
    (why namespaces were refused; "" where they were not) and ``summary``, one line for
    the run start and ``grouprl plan``."""
    layers = _layers()
    names = ("user_ns", "mount_ns", "net_ns", "pid_ns")
    found: dict[str, bool | str] = {name: layers.get(name) is True for name in names}
    found["uid"] = str(layers.get("uid", ""))
    found["why_not"] = "" if found["mount_ns"] else str(layers.get("why_not", "unknown"))
    if found["mount_ns"]:
        summary = (
            "programs run in their own user, mount, network and pid namespaces: a "
            "read-only /usr and interpreter, no network, their dir the only writable "
            f"place; uid on the host: {found['uid']}"
        )
    else:
        summary = (
            f"programs run WITHOUT namespaces ({found['why_not']}): they see the host's "
            "files and network; limits, the process tree and the private dir still hold; "
            f"uid on the host: {found['uid']}. reward.sandbox.require_isolation=true "
            "refuses such a run"
        )
    found["summary"] = summary
    return found


def program_sandbox_line(reward_functions: Sequence[RewardFunction]) -> tuple[str, bool] | None:
    """Where a reward runs generated programs (``code_tests`` among ``reward.functions``):
    which layers enclose them on this machine (``isolation``: a probe, ~0.1 s), for the
    run's start and ``grouprl plan``, and whether namespaces enclose them (False: the
    caller says it as a WARNING); None where no reward runs programs. Torch-free, as
    ``grouprl plan`` imports it."""
    if not any(f.name == "code_tests" for f in reward_functions):
        return None
    found = isolation()
    line = f"program sandbox (code_tests, docs/code.md): {found['summary']}"
    return line, found["mount_ns"] is True
