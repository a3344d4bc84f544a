"""Training through the Python API, no command line: a registered reward function, the
best validation's checkpoint kept beside the newest (also across a resume), MLflow, and
a second fresh run into the same directory refused. Tiny model, transformers engine."""

from __future__ import annotations

import json
import shutil
import time

import pytest
from mlflow.tracking import MlflowClient

import grouprl
from grouprl.ckpt.best import read_best
from grouprl.ckpt.inspect import export, list_checkpoints
from grouprl.config.observe import MlflowConfig
from grouprl.metrics.mlflow_sink import MlflowSink
from grouprl.rewards import registry


def fading(completion: str, **_) -> float:
    """Each call scores less than the ones before, in whichever reward worker process it
    runs (the monotonic clock is the machine's; a counter would be each process's own),
    by far more than math_answer's 0 or 1: the first validation after training (step 1)
    ranks best by eval/reward_mean, and the one before training would if it counted."""
    return -1000.0 * time.monotonic()


def _overrides(run_dir, tiny_model_dir, *extra):
    return [
        f"model.path={tiny_model_dir}",
        "rollout.engine=hf",
        "rollout.n=4",
        "rollout.max_tokens=24",
        "data.batch_size=4",
        "data.train.limit=64",  # of 20,000 (rendering them all: ~2 s a run)
        "data.eval.limit=4",
        "train.mini_batch_size=16",
        "train.micro_batch_size=8",
        "train.steps=2",
        "train.lr=1e-3",
        "trainer.eval_every=1",
        "checkpoint.keep_best=true",
        "checkpoint.best_metric=eval/reward_mean",
        "checkpoint.disk.keep=1",
        "metrics.mlflow.enabled=true",
        "metrics.tensorboard=false",
        "metrics.progress=false",
        "reward.functions=[{name: math_answer}, {name: fading}]",
        f"trainer.run_dir={run_dir}",
        *extra,
    ]


@pytest.fixture(scope="module")
def api_run(tmp_path_factory, tiny_model_dir):
    run_dir = tmp_path_factory.mktemp("api") / "run"
    grouprl.register_reward("fading", fading)
    try:
        cfg = grouprl.load_config("tiny-arith", _overrides(run_dir, tiny_model_dir))
        summary = grouprl.train(cfg)
        yield cfg, run_dir, summary
    finally:
        registry.REWARD_FUNCTIONS.pop("fading")


def _steps(run_dir, key):
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [x["step"] for x in lines if key in x]


def test_two_steps_with_a_registered_reward_then_evaluate(api_run, tiny_model_dir):
    cfg, run_dir, summary = api_run
    assert summary["finished"] and summary["step"] == 2 and summary["run_dir"] == str(run_dir)
    assert _steps(run_dir, "reward/fading") == [1, 2]  # the registered function scored
    metrics = grouprl.evaluate(run_dir, cfg)
    assert 0 <= metrics["eval/accuracy"] <= 1 and metrics["eval/reward_mean"] < 0
    assert cfg.model.path == tiny_model_dir  # evaluate worked on a copy


def test_the_best_validation_is_kept_beside_the_newest(api_run, tmp_path):
    _, run_dir, summary = api_run
    assert summary["best"]["step"] == 1  # not step 0: there is no checkpoint of it
    disk = run_dir / "checkpoints"
    assert sorted(p.name for p in disk.glob("step_*")) == ["step_000001", "step_000002"]
    assert read_best(disk).step == 1
    assert [r.found.step for r in list_checkpoints(str(run_dir)) if r.best] == [1]
    found, out = export(str(run_dir), tmp_path / "best", best=True)
    assert found.step == 1 and (out / "model.safetensors").is_file()


def test_mlflow_holds_the_config_and_every_step(api_run):
    cfg, run_dir, _ = api_run
    client = MlflowClient(tracking_uri=(run_dir / "mlruns").resolve().as_uri())
    run = client.get_run((run_dir / "mlflow_run_id").read_text().strip())
    assert run.data.params["rollout.engine"] == "hf"
    assert run.data.params["checkpoint.best_metric"] == "eval/reward_mean"
    assert client.get_experiment(run.info.experiment_id).name == cfg.name
    history = client.get_metric_history(run.info.run_id, "reward/mean")
    assert [m.step for m in history] == [1, 2]
    # a function's mean and its failures: one a file, the other no folder under it
    for name in ("reward/math_answer", "reward/math_answer.failures"):
        assert [m.step for m in client.get_metric_history(run.info.run_id, name)] == [1, 2]
    assert [m.step for m in client.get_metric_history(run.info.run_id, "eval/accuracy")] == [
        0,
        1,
        2,
    ]


def test_a_second_fresh_run_into_the_directory_is_refused(api_run):
    cfg, run_dir, _ = api_run
    with pytest.raises(grouprl.ConfigError, match=r"trainer.run_dir=.*trainer.resume=auto"):
        grouprl.train(cfg)
    assert _steps(run_dir, "reward/mean") == [1, 2]  # nothing appended


def test_the_best_survives_a_resume(api_run, tiny_model_dir, tmp_path):
    _, run_dir, _ = api_run
    resumed = tmp_path / "resumed"
    shutil.copytree(run_dir, resumed)
    summary = grouprl.train(  # a recipe and overrides work as well as a RunConfig
        "tiny-arith", _overrides(resumed, tiny_model_dir, "train.steps=3", "trainer.resume=auto")
    )
    assert summary["step"] == 3 and summary["best"]["step"] == 1
    disk = resumed / "checkpoints"
    assert sorted(p.name for p in disk.glob("step_*")) == ["step_000001", "step_000003"]
    run_id = (resumed / "mlflow_run_id").read_text().strip()
    client = MlflowClient(tracking_uri=(resumed / "mlruns").resolve().as_uri())
    assert [m.step for m in client.get_metric_history(run_id, "reward/mean")] == [1, 2, 3]


def test_a_resumed_run_logs_into_the_same_mlflow_run(tmp_path):
    cfg = MlflowConfig(enabled=True)
    first = MlflowSink(
        cfg, run_dir=tmp_path, run_name="exp", config_dict={"trainer": {"resume": "never"}}
    )
    first.log(1, {"reward/mean": 0.5})
    first.close()
    again = MlflowSink(
        cfg, run_dir=tmp_path, run_name="exp", config_dict={"trainer": {"resume": "auto"}}
    )
    again.log(2, {"reward/mean": 0.75})
    again.close()
    client = MlflowClient(tracking_uri=(tmp_path / "mlruns").resolve().as_uri())
    run = client.get_run(first.run_id)
    assert again.run_id == first.run_id and run.data.params == {"trainer.resume": "never"}
    history = client.get_metric_history(first.run_id, "reward/mean")
    assert [(m.step, m.value) for m in history] == [(1, 0.5), (2, 0.75)]
    assert client.get_experiment(run.info.experiment_id).name == "exp"
    assert run.info.run_name == tmp_path.name and run.info.status == "FINISHED"
