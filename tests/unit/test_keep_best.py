"""checkpoint.keep_best: ranking validations, the disk tier keeping the best beside the
newest, `ckpt ls`/`prune` and the trainer state carrying the best across a resume."""

from __future__ import annotations

import json
import re
from dataclasses import asdict

import pytest
import torch
from typer.testing import CliRunner

from grouprl.algo.kl import KLController
from grouprl.ckpt.best import Best, improved, read_best
from grouprl.ckpt.checkpointer import Checkpointer
from grouprl.ckpt.inspect import list_checkpoints, prune
from grouprl.ckpt.resume import training_state
from grouprl.ckpt.state import TrainerState, rng_state
from grouprl.cli import app
from grouprl.config.checks import check_config
from grouprl.config.ckpt import CheckpointConfig
from grouprl.config.errors import ConfigError
from grouprl.config.loader import load_config
from grouprl.data.sampler import PromptSampler
from grouprl.driver.components import RunState

ACC = "eval/accuracy"


def test_a_validation_wins_only_by_beating_the_best_in_its_mode():
    first = improved(None, {ACC: 0.5}, step=2, metric=ACC, mode="max")
    assert first == Best(step=2, metric=ACC, value=0.5, mode="max")
    assert improved(first, {ACC: 0.5}, step=4, metric=ACC, mode="max") is None  # tie: earlier
    assert improved(first, {ACC: 0.4}, step=4, metric=ACC, mode="max") is None
    assert improved(first, {ACC: 0.6}, step=4, metric=ACC, mode="max").step == 4
    assert improved(first, {ACC: float("nan")}, step=4, metric=ACC, mode="max") is None
    short = improved(
        None, {"eval/response_len": 30.0}, step=1, metric="eval/response_len", mode="min"
    )
    assert (
        improved(short, {"eval/response_len": 40.0}, step=2, metric="eval/response_len", mode="min")
        is None
    )
    assert (
        improved(
            short, {"eval/response_len": 20.0}, step=2, metric="eval/response_len", mode="min"
        ).value
        == 20.0
    )
    # the recipe now ranks another metric: the old best does not count
    assert (
        improved(
            first, {"eval/reward_mean": -1.0}, step=6, metric="eval/reward_mean", mode="max"
        ).step
        == 6
    )
    with pytest.raises(ConfigError, match=r"checkpoint.best_metric='eval/nope'.*eval/accuracy"):
        improved(None, {ACC: 0.5}, step=1, metric="eval/nope", mode="max")


def _trainer(step: int, best: Best | None) -> TrainerState:
    return TrainerState(
        step=step,
        weight_version=step,
        sampler={"epoch": 0, "position": step},
        scheduler={},
        rng=rng_state(),
        eval_before={},
        best=None if best is None else asdict(best),
    )


def test_the_disk_tier_keeps_the_best_beside_the_newest_and_prune_spares_it(tmp_path):
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    cfg = CheckpointConfig.model_validate({"disk": {"every": 1, "keep": 1}, "keep_best": True})
    ckpt = Checkpointer(cfg, run_dir=tmp_path / "run", run_name="t", config_hash="h")
    best = None
    for step, accuracy in [(1, 0.2), (2, 0.8), (3, 0.5), (4, 0.6)]:
        new = improved(best, {ACC: accuracy}, step=step, metric=ACC, mode="max")
        best = new or best
        ckpt.save(
            step,
            state=lambda: training_state(model=model, optimizer=optimizer),
            trainer=_trainer(step, best),
            files={"hf/config.json": b"{}"},
            best=new is not None,
        )
        ckpt.wait()
    ckpt.close()
    disk = tmp_path / "run" / "checkpoints"
    assert sorted(p.name for p in disk.glob("step_*")) == ["step_000002", "step_000004"]
    assert read_best(disk) == Best(step=2, metric=ACC, value=0.8, mode="max")
    rows = list_checkpoints(str(tmp_path / "run"))
    assert [(r.found.step, r.best is not None) for r in rows] == [(2, True), (4, False)]
    # `ckpt ls` on an 80-column terminal keeps the step column; the best is marked
    listed = CliRunner().invoke(app, ["ckpt", "ls", str(disk)], env={"COLUMNS": "80"})
    assert listed.exit_code == 0, listed.output
    assert re.search(r"^ *step +location +size +files", listed.output, re.M), listed.output
    assert re.search(r"^ +2 +step_000002 \*", listed.output, re.M), listed.output
    assert re.search(r"^ +4 +step_000004 ", listed.output, re.M), listed.output
    assert "* best eval/accuracy=0.8: `grouprl ckpt prune` keeps it" in listed.output
    assert prune(str(tmp_path / "run"), keep=1) == []  # the best is not one to remove
    assert sorted(p.name for p in disk.glob("step_*")) == ["step_000002", "step_000004"]


def test_a_new_best_goes_to_disk_off_its_schedule(tmp_path):
    cfg = CheckpointConfig.model_validate({"disk": {"every": 10}})
    ckpt = Checkpointer(cfg, run_dir=tmp_path, run_name="t", config_hash="h")
    assert ckpt.due_tiers(3) == [] and ckpt.due_tiers(3, best=True) == ["disk"]
    ckpt.close()


def _state() -> RunState:
    return RunState(sampler=PromptSampler(8, seed=0), kl=KLController(0.0))


def test_the_best_rides_in_the_trainer_state_across_a_resume(tmp_path):
    state = _state()
    state.best = Best(step=20, metric=ACC, value=0.85, mode="max")
    path = tmp_path / "trainer.json"
    TrainerState(**state.state_dict(), scheduler={}, rng={}, eval_before={}).write(path)
    resumed = _state()
    resumed.load_state_dict(asdict(TrainerState.read(path)))
    assert resumed.best == state.best
    older = json.loads(path.read_text())
    del older["best"]  # a checkpoint written before keep_best existed
    path.write_text(json.dumps(older))
    resumed.load_state_dict(asdict(TrainerState.read(path)))
    assert resumed.best is None


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["trainer.eval_every=null"], "trainer.eval_every=null validates only after the last"),
        (["data.eval=null"], "data.eval=null validates nothing"),
        (["checkpoint.best_metric=reward/mean"], "checkpoint.best_metric='reward/mean' is not"),
    ],
)
def test_keep_best_needs_validations_to_rank(overrides, message):
    check_config(load_config("tiny-arith", ["checkpoint.keep_best=true"]))  # eval_every: 10
    with pytest.raises(ConfigError, match=message):
        check_config(load_config("tiny-arith", ["checkpoint.keep_best=true", *overrides]))
