"""Training on a 2-node Ray cluster (started by the test on this machine): 2 FSDP2
ranks and 2 engine replicas reach the parameters 1 process reaches on the same data,
also across a resume from a peer node's memory copy; a killed replica restarts the run
from its checkpoint, and a killed rank with no restart left fails it quickly, naming
the rank."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from grouprl.ckpt.export import find_checkpoint, part_state
from grouprl.ckpt.manifest import parse_manifest
from grouprl.config.loader import load_config
from grouprl.driver.run import train
from ray_cluster import ray_env

pytestmark = [pytest.mark.ray, pytest.mark.timeout(900)]
STEPS = 2  # stopped after 1, resumed on the cluster for the 2nd


def _overrides(run_dir: Path, tiny_model_dir: str) -> list[str]:
    return [
        f"model.path={tiny_model_dir}",
        "rollout.engine=hf",
        "rollout.n=4",
        "rollout.max_tokens=32",
        "data.batch_size=4",
        "data.train.limit=64",  # of 20,000 (rendering them all: ~2 s a run)
        "data.eval=null",
        "algo.beta=0.02",  # a reference role too
        "train.mini_batch_size=8",  # 2 updates per step: old logprobs, rank rows
        "train.micro_batch_size=2",
        f"train.steps={STEPS}",
        "train.lr=1e-3",
        "train.num_threads=1",
        "metrics.progress=false",
        "metrics.report=false",  # runs in subprocesses: conftest's default does not reach them
        "metrics.tensorboard=false",
        f"trainer.run_dir={run_dir}",
        "checkpoint.disk.every=1",
        "checkpoint.disk.keep=5",
    ]


def _on_cluster(cluster) -> list[str]:
    return [f"cluster.address={cluster.address}", "cluster.nodes=2"]


def _train_on_cluster(run_dir: Path, args: list[str], *, log: Path) -> subprocess.Popen:
    with open(log, "w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "grouprl", "train", "tiny-arith", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=os.environ | ray_env() | {"PYTHONUNBUFFERED": "1", "COLUMNS": "200"},
        )


def _finish(proc: subprocess.Popen, log: Path) -> str:
    proc.wait(timeout=600)
    output = log.read_text()
    assert proc.returncode == 0, output
    return output


def _rewards(run_dir: Path) -> dict[int, float]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return {x["step"]: x["reward/mean"] for x in map(json.loads, lines) if "reward/mean" in x}


@pytest.fixture(scope="module")
def one_process(tmp_path_factory, tiny_model_dir) -> Path:
    run_dir = tmp_path_factory.mktemp("one") / "run"
    train(load_config("tiny-arith", _overrides(run_dir, tiny_model_dir)))
    return run_dir


def _assert_same_parameters(a_dir: Path, b_dir: Path) -> None:
    a, b = part_state(find_checkpoint(a_dir)), part_state(find_checkpoint(b_dir))
    assert a.keys() == b.keys()
    for key in a:
        # A key bias adds the same q.b to every score of a query, which softmax ignores: its
        # gradient is zero but for rounding, and Adam scales that noise (which the order of
        # the ranks' reductions changes) up to steps near lr * 0.1.
        atol = 1e-4 if key.endswith("k_proj.bias") else 2e-5
        torch.testing.assert_close(b[key], a[key], rtol=0, atol=atol, msg=key)
    initial = part_state(find_checkpoint(a_dir, step=1))
    moved = max(float((a[k] - initial[k]).abs().max()) for k in a)
    assert moved > 1e-4  # the steps after the first changed the weights


def test_two_ranks_and_two_replicas_match_one_process_across_a_resume_from_a_peers_memory(
    ray_cluster, one_process, tmp_path, tiny_model_dir
):
    """A training rank and an engine actor on each node (rollout.replicas=2), each engine
    fed by the rank on its node; each generates its share of every step at the same
    weight version (the trainer scores each replica's samples as it sampled them). The run
    stops after step 1, one node's memory tier is lost, and the run resumes from the
    copies its peer holds (each node keeps its ranks' part of a save and its peer's part).
    The same seeds give the same samples and the same parameters as one process with one
    engine. (One replica beside two ranks is the other Ray test's default.)"""
    run_dir, shm = tmp_path / "replicas", tmp_path / "shm"
    args = [*_overrides(run_dir, tiny_model_dir), *_on_cluster(ray_cluster)]
    args += ["rollout.replicas=2", "checkpoint.memory.every=1", f"checkpoint.memory.dir={shm}"]
    log = tmp_path / "first.log"
    output = _finish(_train_on_cluster(run_dir, [*args, "trainer.stop_after=1"], log=log), log)
    assert "2 training ranks (gloo) on 2 node(s)" in output
    assert "weight pushes: rank 0 -> replicas [0]; rank 1 -> replicas [1]" in output
    path = find_checkpoint(run_dir) / "manifest.json"
    assert path.parent.name == "step_000001"
    assert parse_manifest(path.read_text(), where=str(path)).world_size == 2
    held = sorted(p.relative_to(shm).parts[1:3] for p in shm.glob("*/*/part_*/step_000001"))
    assert held == [
        ("head", "part_00"),
        ("head", "part_01"),
        ("node1", "part_00"),
        ("node1", "part_01"),
    ]
    [lost] = shm.glob("*/node1")
    shutil.rmtree(lost)

    log = tmp_path / "second.log"
    output = _finish(_train_on_cluster(run_dir, [*args, "trainer.resume=auto"], log=log), log)
    assert "resuming from step 1, memory tier of the nodes" in output
    assert not list(shm.glob("*/*/restore"))  # the assembled copies are dropped after loading
    steps = [x for x in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())]
    for x in steps[1:]:
        assert x["replica/0/samples"] > 0 and x["replica/1/samples"] > 0, x
        assert x["replica/0/samples"] + x["replica/1/samples"] == 16
        assert x["replica/0/engine_logprob_gap"] < 1e-4 and x["replica/1/engine_logprob_gap"] < 1e-4
    assert _rewards(run_dir) == pytest.approx(_rewards(one_process))
    _assert_same_parameters(one_process, run_dir)


def _kill(
    proc: subprocess.Popen, *, pid_after: str, ready: Callable[[], bool], log: Path, nth: int = 0
) -> float:
    """SIGKILLs the process (started for this run) whose pid the log gives after the
    pattern ``pid_after`` (its ``nth`` mention: a restart starts new processes), once
    ``ready()``."""
    deadline = time.monotonic() + 300
    pid = None
    while pid is None or not ready():
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        found = re.findall(pid_after + r" pid (\d+)", log.read_text())
        pid = int(found[nth]) if len(found) > nth else None
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)
    return time.monotonic()


def test_a_killed_replica_restarts_the_run_and_a_killed_rank_then_fails_it(
    ray_cluster, tmp_path, tiny_model_dir
):
    """Rollout replica 1 killed after the first checkpoint: the failure names it, and the
    ranks and replicas restart from the checkpoint (trainer.max_restarts=1) and train on.
    Training rank 1 killed then: no restart is left, and the run fails quickly, naming the
    rank and how to resume."""
    run_dir = tmp_path / "killed"
    log = tmp_path / "killed.log"
    args = [*_overrides(run_dir, tiny_model_dir), *_on_cluster(ray_cluster)]
    args += ["rollout.replicas=2", "train.steps=200", "trainer.max_restarts=1"]
    proc = _train_on_cluster(run_dir, args, log=log)
    saved = lambda step: (run_dir / f"checkpoints/step_{step:06d}/manifest.json").is_file
    _kill(proc, pid_after=r"rollout replica 1 of 2 \([^)]*\)", ready=saved(1), log=log)

    def trained_on() -> bool:  # a step after the restart's resume point was saved
        found = re.search(r"resuming from step (\d+)", log.read_text())
        return found is not None and saved(int(found[1]) + 1)()

    killed_at = _kill(proc, pid_after=r"rank 1 \S+", ready=trained_on, log=log, nth=1)
    proc.wait(timeout=180)
    output = log.read_text()
    assert proc.returncode not in (0, None), output
    assert time.monotonic() - killed_at < 120, "the failure took too long to surface"
    died = r"\(node [^)]*\) failed during [^:]*: its process died"
    assert re.search(r"rollout replica 1 of 2 " + died, output), output
    assert "restart 1 of trainer.max_restarts=1" in output
    after_restart = output[output.index("resuming from step") :]
    assert re.search(r"training rank 1 of 2 " + died, after_restart), output
    assert "trainer.resume=auto" in after_restart
