"""Crash safety: a saving loop is killed with SIGKILL at random moments, 10 times over
(20 in `make test-long`) while staging, writing, copying between tiers, uploading to
S3 or writing manifests. After every kill, resume finds a complete checkpoint whose
pieces all belong to one step, no tier lists a partial one, and the next run goes on
from there."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import boto3
import pytest
import torch

from grouprl.ckpt.manifest import verify
from grouprl.ckpt.resume import find_resume, load_training
from grouprl.ckpt.s3 import S3Store
from grouprl.ckpt.state import TRAINER_FILE, TrainerState

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ckpt_crash_driver import make_checkpointer, make_model  # noqa: E402
from long import short_or_long  # noqa: E402

pytestmark = [pytest.mark.s3, pytest.mark.slow, pytest.mark.timeout(900)]
DRIVER = Path(__file__).resolve().parents[1] / "ckpt_crash_driver.py"
RUNS = short_or_long(10, 20)


def _leftovers(root: Path, store: S3Store) -> list[str]:
    """Traces of saves a kill cut short (they must never count as checkpoints)."""
    found = [f"local {p.name}" for p in root.rglob(".tmp-step_*")]
    found += [f"local {p.name}" for p in root.rglob(".outbox/*")]
    names = store.list_names()
    return found + [f"s3 {n}" for n in names if not store.exists(f"{n}/manifest.json")]


def test_every_resume_after_sigkill_is_complete(tmp_path, s3_server, aws_env):
    bucket = "crash"
    boto3.client("s3", endpoint_url=s3_server.endpoint_url).create_bucket(Bucket=bucket)
    store = S3Store(f"s3://{bucket}/runs/crash", endpoint_url=s3_server.endpoint_url)
    rng = random.Random(0)
    steps, interrupted = [], []
    for run in range(RUNS):
        proc = subprocess.Popen(
            [sys.executable, str(DRIVER), str(tmp_path)]
            + ["--endpoint-url", s3_server.endpoint_url, "--bucket", bucket],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        line = proc.stdout.readline()
        assert line.startswith("ready"), line + proc.stdout.read()
        time.sleep(rng.uniform(0.05, 2.0))
        proc.send_signal(signal.SIGKILL)
        proc.wait()

        interrupted.append(_leftovers(tmp_path, store))
        ckpt = make_checkpointer(tmp_path, endpoint_url=s3_server.endpoint_url, bucket=bucket)
        try:
            for found in ckpt.newest():  # whatever a tier lists is complete and intact
                if found.tier != "s3":
                    verify(Path(found.where))
            resumable = find_resume("auto", ckpt, restore_dir=tmp_path / f"restore{run}")
        finally:
            ckpt.close()
        if resumable is None:
            assert not steps, f"run {run}: a checkpoint existed, none was found"
            continue
        step = resumable.manifest.step
        assert step >= (steps[-1] if steps else 0), "resume went back past a newer checkpoint"
        model, optimizer = make_model()
        state = load_training(resumable.path, model=model, optimizer=optimizer)
        assert state.step == step == TrainerState.read(resumable.path / TRAINER_FILE).step
        for p in model.parameters():
            assert torch.all(p == float(step)), f"run {run}: weights not from step {step}"
        for moments in optimizer.state.values():
            assert float(moments["step"]) == step, f"run {run}: optimizer not from step {step}"
        steps.append(step)
    assert len(steps) >= RUNS - 2 and steps[-1] > steps[0], steps
    local = sum(any(x.startswith("local") for x in kill) for kill in interrupted)
    s3 = sum(any(x.startswith("s3") for x in kill) for kill in interrupted)
    print(
        f"\nresumed at steps {steps}; of {RUNS} kills, {local} cut a local write short and "
        f"{s3} an S3 upload"
    )
    assert local > 0 and s3 > 0  # the kills did land inside saves
