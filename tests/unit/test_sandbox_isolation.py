"""What a worker without network can still reach (nothing of the host's Unix sockets,
path-named or abstract), the seccomp filter that holds it, and
``*.sandbox.require_isolation``: a run refused, in ``grouprl plan`` too, where the kernel
refuses what it asks for; a WARNING where the program sandbox runs without namespaces."""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import socket
import sys
import threading
import uuid

import pytest

from grouprl.config.containment import SandboxConfig
from grouprl.config.reward import RewardConfig
from grouprl.config.schema import RunConfig
from grouprl.host import namespaces
from grouprl.rewards import Reward, RewardScorer
from grouprl.sandbox import WorkerPool, isolation, program
from grouprl.sandbox.seccomp import _program, assemble

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="namespaces")

GREETING = b"host socket answered"


def unix_reward(completion: str, **_) -> float:
    """1.0 where the Unix socket at ``completion`` answers (a reward run in the workers)."""
    with socket.socket(socket.AF_UNIX) as client:
        client.settimeout(5)
        client.connect(completion)
        return float(client.recv(64) == GREETING)


def clone_parent() -> int:
    """clone(CLONE_PARENT | SIGCHLD): the child would be the pool's, not this worker's."""
    libc = ctypes.CDLL(None, use_errno=True)
    number = {"x86_64": 56, "aarch64": 220}[os.uname().machine]
    child = libc.syscall(number, 0x8000 | 17, 0, 0, 0, 0)
    if child == 0:
        os._exit(0)
    return -ctypes.get_errno() if child < 0 else child


@pytest.fixture
def host_sockets(tmp_path):
    """A path-named and an abstract Unix socket on the host, each answering GREETING."""
    path = str(tmp_path / "host.sock")
    abstract = f"\0grouprl-test-{uuid.uuid4().hex}"
    servers = []
    for address in (path, abstract):
        server = socket.socket(socket.AF_UNIX)
        server.bind(address)
        server.listen()
        servers.append(server)
        threading.Thread(target=_answer, args=(server,), daemon=True).start()
    yield path, abstract
    for server in servers:
        server.close()


def _answer(server: socket.socket) -> None:
    while True:
        try:
            conn, _ = server.accept()
        except OSError:  # closed
            return
        with conn:
            conn.sendall(GREETING)


@pytest.fixture(scope="module")
def pools():
    """Reward workers as ``reward.network`` true and false make them (``RewardScorer``)."""
    allowed, why = namespaces.host_socket_isolation()
    if not allowed:
        pytest.skip(why)
    with (
        WorkerPool(SandboxConfig(workers=1, memory_mb=None), name="reward", network=True) as online,
        WorkerPool(
            SandboxConfig(workers=1, memory_mb=None), name="reward", network=False
        ) as offline,
    ):
        yield online, offline


def _score(addresses: list[str], *, pool: WorkerPool):
    box = SandboxConfig(timeout_s=20.0)
    reward = RewardConfig(step_timeout_s=None, failure_brake=None, sandbox=box)
    functions = [Reward("unix", unix_reward, 1.0)]
    scorer = RewardScorer(reward, answer_key="answer", functions=functions, pool=pool)
    rows = [{"answer": "", "_index": i} for i in range(len(addresses))]
    return scorer(completions=addresses, rows=rows)


@pytest.mark.procs
def test_a_reward_without_network_reaches_no_host_unix_socket_and_with_it_does(pools, host_sockets):
    online, offline = pools
    addresses = list(host_sockets)  # a path-named socket, then an abstract one
    scores = _score(addresses, pool=online)
    assert scores.total == [1.0, 1.0] and scores.errors == []  # the block is the filter's
    scores = _score(addresses, pool=offline)
    assert offline.network_refused is None
    assert [(e.sample_index, e.error_type) for e in scores.errors] == [
        (0, "PermissionError"),
        (1, "PermissionError"),
    ], scores.errors


@pytest.mark.procs
def test_without_network_clone_parent_is_refused_and_with_it_is_not(pools):
    online, offline = pools
    assert offline.submit(clone_parent).result(timeout=30) == -errno.EPERM
    child = online.submit(clone_parent).result(timeout=30)
    assert child > 0
    assert os.waitpid(child, 0)[0] == child  # this process's child: the pool's, not the worker's


def test_the_filter_jumps_only_forward_within_a_byte_on_each_arch():
    for machine in ("x86_64", "aarch64"):
        rows = assemble(_program(machine))
        assert 30 < len(rows) < 64
        for at, (code, jt, jf, _) in enumerate(rows):
            if code in (0x15, 0x35):  # jeq, jge: both targets are rows after this one
                assert at + 1 + max(jt, jf) < len(rows)
            else:
                assert jt == jf == 0
        assert rows[-1][0] == 0x06  # the last row returns


def _refused(monkeypatch, *, programs: bool = True) -> None:
    """This machine as one where the kernel refuses user namespaces (EPERM)."""
    monkeypatch.setattr(namespaces, "_probe", lambda: (errno.EPERM, -1))
    if programs:
        why = "unshare(user|mount|net|pid|ipc|uts): the kernel refuses them (the test)"
        monkeypatch.setattr(program, "_layers", lambda: {"uid": "0", "why_not": why})


CODE = {"functions": [{"name": "code_tests"}], "correct_function": None}


def test_require_isolation_refuses_a_run_naming_the_key_the_refusal_and_the_fix(monkeypatch):
    _refused(monkeypatch)
    strict = RunConfig(reward={**CODE, "sandbox": {"require_isolation": True}})
    network, programs = isolation.isolation_problems(strict)
    assert network.startswith(
        "reward.sandbox.require_isolation=true, but reward.network=false cannot be kept here: "
        "unshare(CLONE_NEWUSER|CLONE_NEWNET) failed: the kernel refuses"
    ), network
    assert "Fix: run where `unshare -rn true` succeeds" in network
    assert "set reward.sandbox.require_isolation=false" in network
    assert programs.startswith(
        "reward.sandbox.require_isolation=true, but code_tests would run model-written "
        "programs without namespaces here, on the host's files and network (uid on the "
        "host: 0): "
        "unshare(user|mount|net|pid|ipc|uts): the kernel refuses them (the test). Fix:"
    ), programs
    assert isolation.isolation_problems(RunConfig(reward=CODE)) == []  # the default: warned


def test_require_isolation_passes_where_the_kernel_allows_it(monkeypatch):
    monkeypatch.setattr(namespaces, "_probe", lambda: (0, 0))
    monkeypatch.setattr(program, "_layers", lambda: {"mount_ns": True, "uid": "1000"})
    strict = RunConfig(reward={**CODE, "sandbox": {"require_isolation": True}})
    assert isolation.isolation_problems(strict) == []
    monkeypatch.setattr(namespaces, "_probe", lambda: (0, errno.EINVAL))  # no seccomp
    [problem] = isolation.isolation_problems(strict)
    assert "the kernel refused a seccomp filter (EINVAL)" in problem


def test_require_isolation_for_env_refuses_user_code_in_this_process(monkeypatch):
    _refused(monkeypatch, programs=False)
    env = {"name": "my_envs:Maze", "network": True, "sandbox": {"workers": 0}}
    cfg = RunConfig(env={**env, "sandbox": {"workers": 0, "require_isolation": True}})
    [problem] = isolation.isolation_problems(cfg)
    assert problem.startswith("env.sandbox.require_isolation=true, but env.sandbox.workers=0")


def test_plan_fails_the_check_and_warns_of_programs_without_namespaces(monkeypatch):
    from typer.testing import CliRunner

    from grouprl.cli import app

    _refused(monkeypatch)
    keys: list[str] = []  # tiny-code scores with code_tests
    warned = CliRunner().invoke(app, ["plan", "tiny-code", *keys])
    assert "WARNING: program sandbox (code_tests, docs/code.md): programs run WITHOUT" in (
        " ".join(warned.output.split())
    ), warned.output
    assert warned.exit_code == 0, warned.output
    strict = CliRunner().invoke(
        app, ["plan", "tiny-code", *keys, "reward.sandbox.require_isolation=true"]
    )
    assert strict.exit_code == 2, strict.output
    assert "reward.sandbox.require_isolation=true, but code_tests would run" in (
        " ".join(strict.output.split())
    )


def test_the_run_start_warns_where_programs_run_without_namespaces(monkeypatch, caplog):
    from grouprl.rollout.builder import log_containment

    _refused(monkeypatch)
    with caplog.at_level(logging.INFO, logger="grouprl.rollout.builder"):
        log_containment(RunConfig(reward=CODE))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(
        w.startswith("program sandbox (code_tests, docs/code.md): programs run WITHOUT")
        and "reward.sandbox.require_isolation=true refuses" in w
        for w in warnings
    )
    assert any(w.startswith("reward.network=false cannot be kept") for w in warnings), warnings
