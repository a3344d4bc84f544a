"""The sandbox for generated programs (``grouprl.sandbox.program``), fed the hostile
programs of tests/hostile/: each is scored by its outcome, returns within its deadline
plus 2 s, leaves no process running (every process they start keeps a token in its
command line, looked for in /proc afterwards) and writes nothing outside its directory;
the test process survives them all. The hostile runs go four at a time (a module
fixture), so that the deadlines overlap."""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from grouprl.config.containment import SandboxConfig
from grouprl.sandbox import WorkerPool
from grouprl.sandbox import program as sandbox
from grouprl.sandbox.program import PYTHON, ProgramLimits, ProgramResult, isolation, run_program

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc, prctl")

REPO = Path(__file__).resolve().parents[2]
HOSTILE = REPO / "tests" / "hostile"
ENCLOSED = isolation()["mount_ns"] is True
needs_namespaces = pytest.mark.skipif(not ENCLOSED, reason="namespaces refused here")
SHORT = ProgramLimits(wall_s=1.5, cpu_s=5, memory_mb=256)
"""For the programs that never end: the deadline ends them."""
ENDING = ProgramLimits(wall_s=10, cpu_s=10, memory_mb=256)
"""For the programs that end (or are ended by another limit) on their own: a long
deadline, so that a loaded machine does not turn their outcome into a timeout."""
CPU_BOUND = ProgramLimits(wall_s=30, cpu_s=1)
"""One CPU second takes ~1 s alone, ~10 s on 2 cores at a load of 15: a deadline that
only a hang reaches."""


NEVER_END = ("loop", "sleep", "fork_bomb")


@dataclass(frozen=True)
class Ran:
    result: ProgramResult
    took_s: float
    token: str
    limits: ProgramLimits


def _run(
    name: str,
    *args: str,
    limits: ProgramLimits = ENDING,
    stdin: bytes = b"",
    python: str = PYTHON,
) -> Ran:
    token = f"hostile-{uuid.uuid4().hex}"
    files = {"main.py": (HOSTILE / f"{name}.py").read_text()}
    start = time.monotonic()
    argv = [python, "main.py", token, *args]
    result = run_program(argv, files=files, stdin=stdin, limits=limits)
    return Ran(result, time.monotonic() - start, token, limits)


def _gone(token: str, *, within_s: float = 2.0) -> list[int]:
    """``_left_running(token)`` once it is empty, or at ``within_s``: a SIGKILL is
    delivered after kill() returns, so a killed process may show for a moment on a
    loaded machine (one showed in a CI run); one alive past 2 s was not killed."""
    deadline = time.monotonic() + within_s
    while (found := _left_running(token)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


def _left_running(token: str) -> list[int]:
    """Processes whose command line holds ``token`` (zombies are not running)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and token.encode() in (entry / "cmdline").read_bytes():
                state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
                found += [] if state in ("Z", "X") else [int(entry.name)]
        except OSError:
            continue
    return found


@pytest.fixture(scope="module")
def secrets(tmp_path_factory):
    """A run dir holding a secret, a listening socket on 127.0.0.1, and the paths a
    hostile program tries to write (none may exist afterwards)."""
    run_dir = tmp_path_factory.mktemp("run_dir")
    (run_dir / "secret.txt").write_text("run-dir secret")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    marker = uuid.uuid4().hex
    targets = [run_dir / f"{marker}.txt", REPO / f"{marker}.txt", Path(f"/tmp/{marker}.txt")]
    # (without a mount namespace the host's /tmp is open to the program: the fallback
    # guards the rest by uid alone, where it is host root's)
    yield {"run_dir": run_dir, "port": listener.getsockname()[1], "targets": targets}
    listener.close()


@pytest.fixture(scope="module")
def ran(secrets) -> dict[str, Ran]:
    """Every hostile case, run four at a time."""
    cases = {
        "loop": ("loop_forever",),
        "sleep": ("sleep_forever",),
        "fork_bomb": ("fork_bomb",),
        "threads": ("thousand_threads",),
        "alloc_64g": ("allocate_64g",),
        "alloc_resident": ("allocate_resident",),
        "memfd": ("memfd_memory",),
        "print_1g": ("print_gigabyte",),
        "stdin_empty": ("read_stdin",),
        "shadow": ("read_file", "/etc/shadow"),
        "repo": ("read_file", str(REPO / "pyproject.toml")),
        "run_dir": ("read_file", str(secrets["run_dir"] / "secret.txt")),
        "home": ("read_file", str(Path.home() / ".bashrc")),
        "socket": ("open_socket", str(secrets["port"])),
        "kill_parent": ("kill_parent",),
        "daemon": ("leave_daemon",),
        "ok": ("prints_and_exits",),
        "raises": ("raises",),
    }
    cases |= {f"write_{i}": ("write_file", str(t)) for i, t in enumerate(secrets["targets"])}
    cases["write_up"] = ("write_file", "../escape.txt")
    if ENCLOSED:  # without a pid namespace kill(-1) reaches every process of the uid
        cases["kill_everyone"] = ("kill_everyone",)
    with ThreadPoolExecutor(4) as pool:
        futures = {
            name: pool.submit(_run, *args, limits=SHORT if name in NEVER_END else ENDING)
            for name, args in cases.items()
        }
        futures["cpu"] = pool.submit(_run, "loop_forever", limits=CPU_BOUND)
        return {name: future.result() for name, future in futures.items()}


@pytest.mark.procs
def test_every_hostile_program_ends_within_its_deadline_and_leaves_nothing(ran, secrets):
    for name, each in ran.items():
        assert each.took_s < each.limits.wall_s + 2, (name, each.took_s, each.result)
        assert _gone(each.token) == [], (name, each.result)
    for target in secrets["targets"]:
        assert not target.exists(), target


@pytest.mark.parametrize("name", ["loop", "sleep"])
@pytest.mark.procs
def test_a_program_that_never_ends_times_out(ran, name):
    result = ran[name].result
    assert result.outcome == "timeout", result
    assert "wall_s=1.5" in result.detail


@pytest.mark.procs
def test_a_fork_bomb_is_held_to_its_processes_then_ended_by_time_or_cpu(ran):
    result = ran["fork_bomb"].result  # 32 spinning copies: on many cores their CPU
    if result.outcome == "signaled":  # seconds pass cpu_s=5 before the wall deadline
        assert result.signal == signal.SIGXCPU and "cpu_s=5" in result.detail, result
    else:
        assert result.outcome == "timeout", result


@pytest.mark.procs
def test_a_thousand_threads_fail_past_the_process_limit(ran):
    result = ran["threads"].result
    assert result.outcome == "exited" and result.exit_code == 1, result
    assert b"can't start new thread" in result.stderr


@pytest.mark.parametrize("name", ["alloc_64g", "alloc_resident", "memfd"])
@pytest.mark.procs
def test_memory_past_the_limit_is_the_memory_outcome(ran, name):
    result = ran[name].result
    assert result.outcome == "memory", result
    assert "memory_mb=256" in result.detail


@pytest.mark.procs
def test_a_gigabyte_of_output_is_cut_at_the_cap(ran):
    result = ran["print_1g"].result
    assert result.outcome == "output_limit", result
    assert result.stdout == b"x" * SHORT.output_bytes
    assert "stdout passed output_bytes=1048576" in result.detail


@pytest.mark.procs
def test_stdin_is_empty_unless_given(ran):
    assert ran["stdin_empty"].result.stdout == b"0 ''\n"
    given = _run("read_stdin", stdin=b"1 2\n3\n").result
    assert given.outcome == "exited" and given.stdout == b"6 '1 2\\n3\\n'\n", given


@needs_namespaces
@pytest.mark.parametrize("name", ["shadow", "repo", "run_dir", "home"])
@pytest.mark.procs
def test_files_outside_its_dir_cannot_be_read(ran, name):
    result = ran[name].result
    assert result.outcome == "exited" and result.exit_code == 0, result
    assert result.stdout == b"FileNotFoundError\n"  # not there at all: not even a denial


@pytest.mark.parametrize("name", ["write_0", "write_1", "write_2", "write_up"])
@pytest.mark.procs
def test_nothing_is_written_outside_its_dir(ran, name):
    result = ran[name].result
    assert result.outcome == "exited", result
    if ENCLOSED and name != "write_2":  # /tmp is its own dir there: the write lands in it
        assert result.stdout != b"WROTE\n", result


@needs_namespaces
@pytest.mark.procs
def test_no_socket_reaches_anything(ran):
    result = ran["socket"].result
    assert result.stdout == b"OSError 127.0.0.1\nOSError 1.1.1.1\n", result


@pytest.mark.procs
def test_killing_its_parent_or_everyone_spares_the_caller(ran):
    assert ran["kill_parent"].result.stdout.endswith(b"alive\n"), ran["kill_parent"].result
    if ENCLOSED:  # kill(-1) spares init and the caller: its pid namespace holds no other
        everyone = ran["kill_everyone"].result
        assert everyone.outcome == "exited" and everyone.exit_code == 1, everyone
        assert b"ProcessLookupError" in everyone.stderr


@pytest.mark.procs
def test_a_daemon_left_behind_is_killed_when_the_program_exits(ran):
    each = ran["daemon"]
    assert each.result.outcome == "exited" and each.result.stdout == b"bye\n", each.result
    assert each.took_s < 10, each.took_s  # not held open by the daemon's pipes (60 s)


@pytest.mark.procs
def test_the_normal_cases(ran):
    ok, raised = ran["ok"].result, ran["raises"].result
    assert (ok.outcome, ok.exit_code, ok.stdout, ok.stderr) == ("exited", 0, b"45\n", b"")
    assert (raised.outcome, raised.exit_code) == ("exited", 1), raised
    assert b"Traceback" in raised.stderr and b"ValueError: boom" in raised.stderr
    assert 0 < ok.cpu_s < 5 and 0 < ok.wall_s < 5


@pytest.mark.procs
def test_cpu_seconds_past_the_limit_end_in_sigxcpu(ran):
    result = ran["cpu"].result
    assert result.outcome == "signaled" and result.signal == signal.SIGXCPU, result
    assert result.cpu_s >= 0.9


@pytest.mark.procs
def test_its_files_are_written_first_and_its_dir_is_removed_after():
    code = "import os\nprint(open('data/in.txt').read(), os.getcwd() == os.environ['HOME'])\n"
    files = {"main.py": code, "data/in.txt": b"given"}
    seen = set(Path(os.environ.get("TMPDIR", "/tmp")).glob("grouprl-program-*"))
    result = run_program([PYTHON, "main.py"], files=files)
    assert result.stdout == b"given True\n", result
    assert set(Path(os.environ.get("TMPDIR", "/tmp")).glob("grouprl-program-*")) <= seen


def test_a_file_key_that_leaves_the_dir_is_a_sandbox_error_naming_it():
    result = run_program([PYTHON, "main.py"], files={"../x.py": "print(1)"})
    assert result.outcome == "sandbox_error"
    assert "files key '../x.py' leaves the sandbox dir" in result.detail


def test_isolation_names_each_layer_and_says_it_in_a_line():
    found = isolation()
    assert set(found) == {"user_ns", "mount_ns", "net_ns", "pid_ns", "uid", "why_not", "summary"}
    assert (found["why_not"] == "") == found["mount_ns"]  # why namespaces were refused
    assert isinstance(found["summary"], str) and "namespaces" in found["summary"]
    if ENCLOSED and os.geteuid() == 0:
        assert found["uid"] == "nobody (65534) instead of root"


@needs_namespaces
@pytest.mark.procs
def test_the_program_is_pid_2_uid_1000_without_capabilities_and_sees_little():
    code = (
        "import json, os\n"
        "caps = [l for l in open('/proc/self/status') if l.startswith('CapEff')]\n"
        "seen = {p: sorted(os.listdir(p)) for p in ('/', '/etc', '/root') if os.path.isdir(p)}\n"
        "print(json.dumps([os.getpid(), os.getuid(), caps[0].split()[1], seen]))\n"
    )
    result = run_program([PYTHON, "main.py"], files={"main.py": code})
    pid, uid, caps, seen = json.loads(result.stdout)
    assert (pid, uid, caps) == (2, 1000, "0000000000000000"), result
    assert set(seen["/"]) <= {"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc"} | {
        "root",  # where the interpreter's prefix is under /root: that prefix alone
        "sandbox",
        "sbin",
        "tmp",
        "usr",
    }, seen
    assert set(seen["/etc"]) <= {"ld.so.cache", "localtime"}, seen
    assert seen.get("/root", []) in ([], [".pyenv"]), seen


@pytest.mark.procs
def test_without_namespaces_limits_and_the_tree_still_hold(monkeypatch):
    monkeypatch.setattr(sandbox, "_layers", lambda: {"why_not": "refused for the test"})
    python = PYTHON
    if os.geteuid() == 0:  # run as nobody then: an interpreter under /root is closed to it
        python = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else PYTHON
    slow = _run("sleep_forever", limits=SHORT, python=python)
    assert slow.result.outcome == "timeout" and slow.took_s < SHORT.wall_s + 2, slow.result
    daemon = _run("leave_daemon", python=python)
    assert daemon.result.stdout == b"bye\n", daemon.result
    for each in (slow, daemon):
        assert _gone(each.token) == []


def _through_worker(code: str) -> tuple[ProgramResult, dict, str]:
    result = run_program([PYTHON, "main.py"], files={"main.py": code})
    return result, isolation(), Path("/proc/self/uid_map").read_text()


_PROC_WRITE = (
    "import os\n"
    "try:\n"
    "    with open('/proc/sys/kernel/hostname', 'w') as file:\n"  # (its own uts namespace's)
    "        file.write('x')\n"
    "    wrote = 'WROTE'\n"
    "except OSError as err:\n"
    "    wrote = err.errno\n"
    "print(os.getpid(), os.path.exists('/etc/shadow'), wrote)\n"
)
_WHO = (
    "caps = [l.split()[1] for l in open('/proc/self/status') if l.startswith('CapEff')]\n"
    "print(os.getuid(), caps[0], open('/proc/self/uid_map').read().split()[1])\n"
)


@pytest.mark.procs
def test_a_program_runs_from_inside_a_reward_worker_as_nobody_without_network():
    # a root worker's user namespace maps root and nobody (sandbox/isolation.py): the
    # program drops to nobody there as from the trainer, never host uid 0
    with WorkerPool(
        SandboxConfig(workers=1, memory_mb=1024), name="program", network=False
    ) as pool:
        future = pool.submit(_through_worker, _PROC_WRITE + _WHO, deadline_s=30)
        result, layers, worker_map = future.result()
    assert result.outcome == "exited", result
    if not layers["mount_ns"]:  # nested namespaces: allowed where the kernel allows ours
        return
    first, who = result.stdout.decode().splitlines()
    assert first == f"2 False {errno.EROFS}", result
    uid, caps, outside = who.split()  # outside: its uid in the worker's namespace
    assert (uid, caps) == ("1000", "0000000000000000"), result
    if os.geteuid() == 0:
        assert worker_map.split() == ["0", "0", "1", "65534", "65534", "1"], worker_map
        assert outside == "65534" and layers["uid"] == "nobody (65534) instead of root"
    else:
        assert outside == str(os.geteuid())


@needs_namespaces
@pytest.mark.procs
def test_its_proc_is_read_only():
    result = run_program([PYTHON, "main.py"], files={"main.py": _PROC_WRITE})
    assert result.stdout == f"2 False {errno.EROFS}\n".encode(), result


@pytest.mark.procs
def test_a_caller_killed_mid_run_takes_the_program_with_it():
    token = f"hostile-{uuid.uuid4().hex}"
    caller = (
        "from pathlib import Path\n"
        "from grouprl.sandbox.program import PYTHON, ProgramLimits, run_program\n"
        f"code = Path({str(HOSTILE / 'sleep_forever.py')!r}).read_text()\n"
        f"run_program([PYTHON, 'main.py', {token!r}], files={{'main.py': code}},\n"
        "            limits=ProgramLimits(wall_s=60))\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", caller])
    try:
        deadline = time.monotonic() + 20
        while not _left_running(token):
            assert time.monotonic() < deadline and proc.poll() is None, "never started"
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 2
    while _left_running(token) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _left_running(token) == []


@needs_namespaces
@pytest.mark.skipif(not Path("/usr/bin/unshare").exists(), reason="util-linux unshare")
@pytest.mark.procs
def test_where_the_kernel_refuses_namespaces_isolation_says_why_and_programs_still_run():
    # user.max_user_namespaces is per user namespace: 0 in a throwaway one refuses ours
    script = (
        "from grouprl.sandbox.program import PYTHON, isolation, run_program\n"
        "found = isolation()\n"
        "print(found['mount_ns'], found['summary'])\n"
        "print(run_program(['/usr/bin/env', 'echo', 'ran'], files={}).stdout)\n"
    )
    shell = f'echo 0 > /proc/sys/user/max_user_namespaces && {sys.executable} -c "$0"'
    done = subprocess.run(
        ["/usr/bin/unshare", "-r", "sh", "-c", shell, script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()
    assert first.startswith("False programs run WITHOUT namespaces"), first
    assert "user.max_user_namespaces" in first
    assert second == "b'ran\\n'"


def test_limits_name_a_bad_value_and_what_is_allowed():
    with pytest.raises(ValueError, match=r"ProgramLimits.wall_s=0: give a positive number"):
        ProgramLimits(wall_s=0)
    with pytest.raises(ValueError, match=r"ProgramLimits.output_bytes=-1: give 0 or more"):
        ProgramLimits(output_bytes=-1)
