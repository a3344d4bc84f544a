"""The S3 tier against a real S3-compatible server (moto, 127.0.0.1): an outage in the
middle of an upload neither blocks nor stops training, and a run whose local copies are
gone resumes from S3."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import boto3
import pytest
import torch

from grouprl.ckpt.checkpointer import Checkpointer
from grouprl.ckpt.export import find_checkpoint, part_state
from grouprl.ckpt.manifest import verify
from grouprl.ckpt.resume import find_resume, training_state
from grouprl.ckpt.state import TrainerState
from grouprl.config.ckpt import CheckpointConfig
from grouprl.config.loader import load_config
from grouprl.driver.run import train

pytestmark = [pytest.mark.s3, pytest.mark.timeout(600)]


def _model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(4)])
    return model, torch.optim.AdamW(model.parameters())


def _trainer(step: int) -> TrainerState:
    return TrainerState(step, step, {}, {}, {}, {})


def test_an_s3_outage_mid_upload_neither_blocks_nor_stops_training(
    tmp_path, s3_server, aws_env, caplog
):
    boto3.client("s3", endpoint_url=s3_server.endpoint_url).create_bucket(Bucket="outage")
    cfg = CheckpointConfig.model_validate(
        {
            "disk": {"every": 1, "keep": 10},
            "s3": {
                "uri": "s3://outage/runs",
                "endpoint_url": s3_server.endpoint_url,
                "every": 1,
                "max_backoff_s": 0.5,
            },
        }
    )
    ckpt = Checkpointer(cfg, run_dir=tmp_path, run_name="r", config_hash="h")
    model, optimizer = _model()

    def save(step: int) -> float:
        started = time.perf_counter()
        ckpt.save(
            step,
            state=lambda: training_state(model=model, optimizer=optimizer),
            trainer=_trainer(step),
            files={},
        )
        return time.perf_counter() - started

    save(1)
    s3_server.stop()  # mid-upload of step 1 (or just before it starts)
    blocking = [save(step) for step in range(2, 6)]
    assert ckpt.wait(timeout=30, uploads=False)
    assert not ckpt.wait(timeout=0)  # the upload is still retrying
    assert [f.step for f in ckpt.disk.complete()] == [1, 2, 3, 4, 5]  # training went on
    assert max(blocking) < 5.0, blocking  # no save waited for S3
    time.sleep(1.5)
    assert "retry" in caplog.text.lower()

    s3_server.start()  # the server comes back empty
    boto3.client("s3", endpoint_url=s3_server.endpoint_url).create_bucket(Bucket="outage")
    assert ckpt.wait(timeout=60), "the upload did not finish after the server returned"
    (newest,) = [f for f in ckpt.s3.complete() if f.step == 5]
    local = ckpt.s3.restore(newest, tmp_path / "fetched").path
    assert verify(local).step == 5
    ckpt.close()


def _run_overrides(run_dir: Path, tiny_model_dir: str, endpoint: str) -> list[str]:
    return [
        f"model.path={tiny_model_dir}",
        "rollout.engine=hf",
        "rollout.n=4",
        "rollout.max_tokens=32",
        "data.batch_size=4",
        "data.train.limit=64",  # of 20,000 (rendering them all: ~2 s a run)
        "data.eval=null",
        "train.mini_batch_size=8",
        "train.micro_batch_size=8",
        "train.lr=1e-3",
        "metrics.progress=false",
        "metrics.tensorboard=false",
        f"trainer.run_dir={run_dir}",
        "checkpoint.s3.uri=s3://resume/runs",
        f"checkpoint.s3.endpoint_url={endpoint}",
        "checkpoint.s3.every=1",
    ]


def test_a_run_whose_local_copies_are_gone_resumes_from_s3(tmp_path, s3_server, aws_env):
    boto3.client("s3", endpoint_url=s3_server.endpoint_url).create_bucket(Bucket="resume")
    args = _run_overrides(tmp_path / "run", tiny_model_dir := _tiny(), s3_server.endpoint_url)
    train(load_config("tiny-arith", [*args, "train.steps=3", "trainer.stop_after=2"]))
    shutil.rmtree(tmp_path / "run" / "checkpoints")  # a new machine: only S3 is left
    cfg = load_config("tiny-arith", [*args, "train.steps=3", "trainer.resume=auto"])
    ckpt = Checkpointer(cfg.checkpoint, run_dir=tmp_path / "run", run_name=cfg.name, config_hash="")
    found = find_resume("auto", ckpt, restore_dir=tmp_path / "restore")
    ckpt.close()
    assert (found.tier, found.manifest.step) == ("s3", 2)
    summary = train(cfg)
    assert summary["step"] == 3 and summary["finished"]

    straight = load_config(
        "tiny-arith",
        [*_run_overrides(tmp_path / "straight", tiny_model_dir, "")[:-3], "train.steps=3"],
    )
    train(straight)
    a = part_state(find_checkpoint(tmp_path / "straight"))
    b = part_state(find_checkpoint(tmp_path / "run"))
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=1e-6, msg=key)


def _tiny() -> str:
    return str(Path(__file__).resolve().parents[2] / "src/grouprl/assets/tiny-arith")
