"""A multi-node Ray cluster on this machine for tests: `ray start --block` processes
(a head with the dashboard, then workers), each in its own session, stopped by PID.

Ray gives every node this machine's own interface address (it refuses loopback for a
multi-node cluster); the dashboard listens on 127.0.0.1. ``actor_replicas``: rollout
replicas in Ray actors on such a cluster, for a test in this process.
"""

from __future__ import annotations

import builtins
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from grouprl.engines.replicas import ReplicaSet

RAY = str(Path(sys.executable).with_name("ray"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ray_env() -> dict[str, str]:
    """What every Ray process of a test shares: no auth token, no usage reports, no drain
    on SIGTERM (a node would wait 30 s for a GCS that the same stop has ended), and this
    environment's python first on PATH (as in a cluster image, jobs run `python`)."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return {
        "RAY_AUTH_MODE": "disabled",
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
        "PATH": path,
    }


class LocalRayCluster:
    def __init__(self, *, nodes: int = 2, cpus_per_node: int = 1) -> None:
        self.nodes, self.cpus = nodes, cpus_per_node
        # short: Ray's socket paths must fit in 107 characters
        self.temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")
        self.port, self.dashboard_port = free_port(), free_port()
        self.procs: list[subprocess.Popen] = []

    @property
    def address(self) -> str:
        return f"{socket.gethostname()}:{self.port}"

    @property
    def dashboard_url(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def _start(self, args: list[str], name: str) -> None:
        log = open(Path(self.temp_dir) / f"{name}.log", "wb")  # noqa: SIM115 (kept open)
        env = {**os.environ, **ray_env(), "GROUPRL_NODE_TAG": name}  # its memory-tier dir
        common = ["--block", "--disable-usage-stats", f"--num-cpus={self.cpus}"]
        common += ["--object-store-memory=200000000"]
        self.procs.append(
            subprocess.Popen(
                [RAY, "start", *common, *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        )

    def start(self, timeout_s: float = 120) -> LocalRayCluster:
        self._start(
            [
                "--head",
                f"--port={self.port}",
                f"--temp-dir={self.temp_dir}",
                "--dashboard-host=127.0.0.1",
                f"--dashboard-port={self.dashboard_port}",
            ],
            "head",
        )
        self._wait_nodes(1, timeout_s)
        for i in range(1, self.nodes):
            self._start([f"--address={self.address}"], f"node{i}")
        self._wait_nodes(self.nodes, timeout_s)
        return self

    def _wait_nodes(self, count: int, timeout_s: float) -> None:
        script = (
            "import ray,sys;ray.init(address=sys.argv[1],logging_level='ERROR');"
            "print(sum(n['Alive'] for n in ray.nodes()))"
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for proc in self.procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"ray start exited {proc.returncode}; see {self.temp_dir}")
            out = subprocess.run(
                [sys.executable, "-c", script, self.address],
                capture_output=True,
                text=True,
                env={**os.environ, **ray_env()},
                timeout=60,
            )
            if out.returncode == 0 and out.stdout.strip().isdigit() and int(out.stdout) >= count:
                return
            time.sleep(1)
        raise RuntimeError(f"{count} Ray nodes not up after {timeout_s} s; see {self.temp_dir}")

    def stop(self) -> None:
        """SIGTERM each `ray start` (it stops its raylet, GCS and workers), newest first."""
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs.clear()


@contextmanager
def actor_replicas(
    cluster: LocalRayCluster, *, model_dir: str, cache_dir: str, overrides: Sequence[str] = ()
) -> Iterator[ReplicaSet]:
    """hf-engine rollout replicas in Ray actors on ``cluster`` (the tiny-arith config with
    ``overrides``), this process joined to it with ``ray_env``. On leaving: the replicas
    closed, this process's connection shut (the cluster runs on) and ``print`` given back
    (``ray.init`` patches it) for the tests after this one in the process."""
    import ray

    from grouprl.config.loader import load_config
    from grouprl.engines.placement import start_replicas

    cfg = load_config(
        "tiny-arith",
        [
            f"model.path={model_dir}",
            "rollout.engine=hf",
            "rollout.placement=actor",
            f"cluster.address={cluster.address}",
            *overrides,
        ],
    )
    engines, plain_print = None, builtins.print
    with pytest.MonkeyPatch.context() as env:
        for key, value in ray_env().items():
            env.setenv(key, value)
        try:
            engines = start_replicas(
                cfg, model_dir=model_dir, cache_dir=cache_dir, places=[], on_gpu=False
            )
            yield engines
        finally:
            if engines is not None:
                engines.close()
            ray.shutdown()
            builtins.print = plain_print
