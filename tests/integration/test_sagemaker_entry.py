"""launch/sagemaker/entry.py on one host for real: a run cut short (as by a spot
interruption) leaves its checkpoint in the checkpoint dir; the restarted job resumes
from it and writes the final model to SM_MODEL_DIR."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import AutoConfig

pytestmark = pytest.mark.timeout(600)
ENTRY = Path(__file__).resolve().parents[2] / "launch/sagemaker/entry.py"


def _job(
    tmp_path: Path, tiny_model_dir: str, *extra: str, attempt: int
) -> subprocess.CompletedProcess:
    """One container's run: the checkpoint dir persists across attempts (SageMaker syncs
    it with S3), the model dir is the attempt's own."""
    overrides = [
        f"model.path={tiny_model_dir}",
        "rollout.engine=hf",
        "rollout.n=4",
        "rollout.max_tokens=32",
        "data.batch_size=4",
        "data.train.limit=64",  # of 20,000 (rendering them all: ~2 s a run)
        "data.eval=null",
        "train.mini_batch_size=16",
        "train.micro_batch_size=8",
        "train.steps=2",  # the second attempt resumes at 1 and trains on
        "metrics.progress=false",
        "metrics.report=false",  # a subprocess: conftest's default does not reach it
        *extra,
    ]
    hps = {"recipe": "tiny-arith", "overrides": " ".join(overrides)}
    hps["checkpoint_dir"] = str(tmp_path / "checkpoints")
    env = os.environ | {
        "SM_HOSTS": json.dumps(["algo-1"]),
        "SM_CURRENT_HOST": "algo-1",
        "SM_MODEL_DIR": str(tmp_path / f"model-{attempt}"),
        "SM_OUTPUT_DATA_DIR": str(tmp_path / "output"),
        "SM_HPS": json.dumps(hps),
    }
    return subprocess.run(
        [sys.executable, str(ENTRY)], env=env, capture_output=True, text=True, timeout=500
    )


def test_an_interrupted_job_resumes_from_its_checkpoint_dir(tmp_path, tiny_model_dir):
    first = _job(tmp_path, tiny_model_dir, "trainer.stop_after=1", attempt=1)
    assert first.returncode == 0, first.stdout + first.stderr
    assert [p.name for p in (tmp_path / "checkpoints").glob("step_*")] == ["step_000001"]

    second = _job(tmp_path, tiny_model_dir, attempt=2)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "resuming from step 1" in second.stderr
    assert "exported step 2" in second.stdout
    config = AutoConfig.from_pretrained(tmp_path / "model-2")
    assert config.model_type == AutoConfig.from_pretrained(tiny_model_dir).model_type
    assert (tmp_path / "model-2" / "model.safetensors").is_file()
