"""Small things that said the wrong thing (issue 37, item 21): `grouprl plan` shows how
each reward function is called; a failure warning names only the on_error keys of the
failures that occurred; the learning rate's warm-up counts training steps, as its key's
docstring says (verl's meaning), whatever the number of optimizer steps in a step."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap

import pytest
import torch
from test_failed_samples import _components, _scored

from grouprl.config.train import TrainConfig
from grouprl.driver.loop import train_step
from grouprl.rollout.reward import fail
from grouprl.workers.optim import make_scheduler

REWARDS = textwrap.dedent(
    """
    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        return 1.0

    def format_reward(completions, **kwargs):
        return [1.0 for _ in completions]

    def mine(completion, *, reference, **kwargs):
        return 0.0
    """
)


@pytest.mark.procs
def test_plan_shows_each_reward_functions_style(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "styles.py").write_text(REWARDS)
    functions = (
        "reward.functions=[{name: math_answer}, {name: 'styles.py:compute_score'}, "
        "{name: 'styles.py:format_reward', weight: 0.5}, {name: 'styles.py:mine', style: grouprl}]"
    )
    argv = ["plan", "tiny-arith", functions, "--json"]
    done = subprocess.run(
        [sys.executable, "-c", "from grouprl.cli import main; main()", *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )
    plan = json.loads(done.stdout)  # its problems: builtin:arith has no data_source column
    (how,) = [r["how"] for r in plan["sections"]["algorithm"] if r["quantity"] == "reward"]
    for shown in (
        "math_answer x 1.0 (grouprl style, detected)",
        "styles.py:compute_score x 1.0 (verl style, detected)",
        "styles.py:format_reward x 0.5 (trl style, detected)",
        "styles.py:mine x 1.0 (grouprl style, declared)",
    ):
        assert shown in how, how


@pytest.mark.parametrize(
    ("reasons", "keys"),
    [
        (["reward_error"], "Set reward.on_error to zero"),
        (["agent_error"], "Set env.on_error to zero"),
        (["env_error", "reward_error"], "Set env.on_error and reward.on_error to zero"),
    ],
)
def test_a_failure_warning_names_the_keys_of_the_failures_that_occurred(caplog, reasons, keys):
    c = _components()
    trajectories = _scored([1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0], prompts=2)
    for i, reason in enumerate(reasons):
        fail(trajectories[i], reason=reason)
    with caplog.at_level(logging.WARNING, logger="grouprl.driver.loop"):
        train_step(c, trajectories, step=3)
    (said,) = [r.getMessage() for r in caplog.records if "left out of training" in r.getMessage()]
    assert f"{keys} to train such samples as reward 0 instead, or to raise" in said, said
    other = {"reward_error": "env.on_error", "agent_error": "reward.on_error"}
    if len(reasons) == 1:
        assert other[reasons[0]] not in said, said


def test_the_warm_up_rises_per_training_step_whatever_the_optimizer_steps_in_it():
    """``train.warmup_steps`` counts training steps (verl's lr_warmup_steps), not
    optimizer steps (TRL's): the policy steps the schedule once per training step
    (``PolicyWorker.update``), after all of that step's mini-batch updates."""
    weight = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.AdamW([weight], lr=1e-3)
    scheduler = make_scheduler(optimizer, TrainConfig(lr=1e-3, warmup_steps=4), total_steps=10)
    rates = []
    for _step in range(5):
        for _mini_batch in range(3):  # three optimizer steps in one training step
            rates.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
        scheduler.step()
    per_step = [rates[3 * k] for k in range(5)]
    assert per_step == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3])
    assert all(rates[3 * k] == rates[3 * k + 2] for k in range(5))  # shared within a step
    assert "Training steps" in TrainConfig.model_fields["warmup_steps"].description
