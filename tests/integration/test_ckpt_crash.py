"""Crash safety: a saving loop is killed with SIGKILL at random moments, 10 times over
(20 in `make test-long`) while staging, writing, copying between tiers, uploading to
S3 or writing manifests. After every kill, resume finds a complete checkpoint whose
pieces all belong to one step, no tier lists a partial one, and the next run goes on
from there."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import boto3
import pytest
import torch

from grouprl.ckpt.manifest import verify
from grouprl.ckpt.resume import find_resume, load_training
from grouprl.ckpt.s3 import S3Store
from grouprl.ckpt.state import TRAINER_FILE, TrainerState

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ckpt_crash_driver import make_checkpointer, make_model
from long import short_or_long

pytestmark = [pytest.mark.s3, pytest.mark.slow, pytest.mark.timeout(900)]
DRIVER = Path(__file__).resolve().parents[1] / "ckpt_crash_driver.py"
RUNS = short_or_long(10, 20)


def _leftovers(root: Path, store: S3Store) -> list[str]:
    """Traces of saves a kill cut short (they must never count as checkpoints)."""
    found = [f"local {p.name}" for p in root.rglob(".tmp-step_*")]
    found += [f"local {p.name}" for p in root.rglob(".outbox/*")]
    names = store.list_names()
    return found + [f"s3 {n}" for n in names if not store.exists(f"{n}/manifest.json")]


@contextmanager
def _crash_driver(root: Path, *, endpoint_url: str, bucket: str) -> Iterator[subprocess.Popen]:
    """The crash driver's server: it forks a saving loop per line it reads."""
    server = subprocess.Popen(
        [
            sys.executable,
            str(DRIVER),
            str(root),
            "--endpoint-url",
            endpoint_url,
            "--bucket",
            bucket,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield server
    finally:
        server.kill()
        server.wait()


def _kill_a_saving_loop(server: subprocess.Popen, *, after_s: float) -> None:
    """Starts a saving loop (it resumes from the newest checkpoint first) and SIGKILLs it
    ``after_s`` seconds after it is ready. Lines it logs besides are passed over (a kill
    can cut one short: the server starts its own on a new line)."""
    server.stdin.write("run\n")
    server.stdin.flush()
    seen: list[str] = []
    while not (line := server.stdout.readline()).startswith("ready"):
        assert line and line != "exited\n", "the saving loop ended early:\n" + "".join(seen)
        seen.append(line)
    time.sleep(after_s)
    os.kill(int(line.split(" pid ")[1]), signal.SIGKILL)
    while (line := server.stdout.readline()) != "exited\n":
        assert line, "the crash driver's server stopped"


def _resumable_step(root: Path, *, endpoint_url: str, bucket: str, run: int) -> int | None:
    """The step resume finds after a kill (None: no checkpoint), its pieces checked."""
    ckpt = make_checkpointer(root, endpoint_url=endpoint_url, bucket=bucket)
    try:
        for found in ckpt.newest():  # whatever a tier lists is complete and intact
            if found.tier != "s3":
                verify(Path(found.where))
        resumable = find_resume("auto", ckpt, restore_dir=root / f"restore{run}")
    finally:
        ckpt.close()
    if resumable is None:
        return None
    step = resumable.manifest.step
    model, optimizer = make_model()
    state = load_training(resumable.path, model=model, optimizer=optimizer)
    assert state.step == step == TrainerState.read(resumable.path / TRAINER_FILE).step
    for p in model.parameters():
        assert torch.all(p == float(step)), f"run {run}: weights not from step {step}"
    for moments in optimizer.state.values():
        assert float(moments["step"]) == step, f"run {run}: optimizer not from step {step}"
    return step


def test_every_resume_after_sigkill_is_complete(tmp_path, s3_server, aws_env):
    bucket, endpoint_url = "crash", s3_server.endpoint_url
    boto3.client("s3", endpoint_url=endpoint_url).create_bucket(Bucket=bucket)
    store = S3Store(f"s3://{bucket}/runs/crash", endpoint_url=endpoint_url)
    rng = random.Random(0)
    steps, interrupted = [], []
    with _crash_driver(tmp_path, endpoint_url=endpoint_url, bucket=bucket) as server:
        for run in range(RUNS):
            _kill_a_saving_loop(server, after_s=rng.uniform(0.05, 2.0))
            interrupted.append(_leftovers(tmp_path, store))
            step = _resumable_step(tmp_path, endpoint_url=endpoint_url, bucket=bucket, run=run)
            if step is None:
                assert not steps, f"run {run}: a checkpoint existed, none was found"
                continue
            assert step >= (steps[-1] if steps else 0), "resume went back past a newer checkpoint"
            steps.append(step)
    assert len(steps) >= RUNS - 2 and steps[-1] > steps[0], steps
    local = sum(any(x.startswith("local") for x in kill) for kill in interrupted)
    s3 = sum(any(x.startswith("s3") for x in kill) for kill in interrupted)
    print(
        f"\nresumed at steps {steps}; of {RUNS} kills, {local} cut a local write short and "
        f"{s3} an S3 upload"
    )
    assert local > 0 and s3 > 0  # the kills did land inside saves
