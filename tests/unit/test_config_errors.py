"""Config mistakes that used to get a generic or raw message: Hydra's `~key`, a value set
wrongly from Python, `reward.correct_function`, a metrics sink whose package is missing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from rich.console import Console

import grouprl
from grouprl.config import ConfigError, load_config
from grouprl.config.observe import MlflowConfig
from grouprl.config.schema import RunConfig
from grouprl.driver.evaluate import validate
from grouprl.metrics.console import ConsoleSink
from grouprl.rewards.scoring import RewardScores
from grouprl.types import Completion, Trajectory, Turn

ROOT = Path(__file__).resolve().parents[2]


# --- Hydra's delete syntax ----------------------------------------------------


def test_a_tilde_override_says_what_it_means_and_the_grouprl_way():
    with pytest.raises(ConfigError) as err:
        load_config("tiny-arith", ["~data.eval"])
    text = str(err.value)
    assert "Hydra's '~' deletes a key" in text and "write data.eval=null" in text
    with pytest.raises(ConfigError, match=r"rollout\.n cannot be turned off.*default \(8\)"):
        load_config("tiny-arith", ["~rollout.n"])
    with pytest.raises(ConfigError, match=r"write critic=null"):
        load_config("tiny-arith", ["~critic=whatever"])


# --- values set from Python ---------------------------------------------------


def test_a_value_set_wrongly_from_python_is_a_config_error_naming_the_key():
    cfg = load_config("tiny-arith", [])
    with pytest.raises(ConfigError) as err:
        cfg.rollout.n = "x"
    text = str(err.value)
    assert text.startswith("cfg.rollout.n = 'x': should be a valid integer")
    assert "(allowed: integer >= 1)" in text and "Fix:" in text
    assert "pydantic" not in text and "https://" not in text
    with pytest.raises(ConfigError, match=r"cfg\.rollout\.n = 0: should be greater than or"):
        cfg.rollout.n = 0
    with pytest.raises(ConfigError, match=r"cfg\.reward\.functions\.0\.scope = 'x'.*sample, group"):
        cfg.reward.functions[0].scope = "x"
    with pytest.raises(ConfigError, match=r"cfg\.rollout\.temprature: there is no such key"):
        cfg.rollout.temprature = 0.5
    cfg.data.eval = {"source": "builtin:arith", "split": "test"}  # a new section is named too
    with pytest.raises(ConfigError, match=r"cfg\.data\.eval\.limit = 0"):
        cfg.data.eval.limit = 0
    with pytest.raises(ConfigError, match=r"cfg\.name = 3"):
        grouprl.RunConfig().name = 3
    with pytest.raises(ConfigError, match=r"MlflowConfig\.enabled = 'maybe'.*true/false"):
        MlflowConfig().enabled = "maybe"  # a section made on its own: named by its class


# --- reward.correct_function --------------------------------------------------


def test_a_correct_function_not_among_the_functions_says_what_it_is_and_both_fixes():
    cfg = load_config("tiny-arith", ["reward.functions=[{name: format}]"])
    with pytest.raises(ConfigError) as err:
        grouprl.check_config(cfg)
    text = str(err.value)
    assert "reward.correct_function='math_answer' is not one of the reward.functions" in text
    assert "counts as a correct answer" in text
    assert "reward.correct_function=format" in text and "reward.correct_function=null" in text


def _trajectory(*, correct: bool) -> Trajectory:
    completion = Completion(token_ids=[1, 2], logprobs=[0.0, 0.0], finish_reason="stop")
    return Trajectory(
        prompt_index=0,
        prompt_ids=[0],
        turns=[Turn(completion)],
        weight_version=0,
        reward=0.5,
        correct=correct,
    )


def test_without_a_correct_function_no_accuracy_is_logged_or_shown():
    def run(prompt_set, settings):
        return [_trajectory(correct=False)] * 2, RewardScores(total=[0.5, 0.5], parts={})

    cfg = load_config("tiny-arith", ["reward.correct_function=null"])
    assert not cfg.judges_correctness
    judged = validate(run=run, prompt_set=None, rollout=cfg.rollout, seed=0)
    assert judged["eval/accuracy"] == 0.0
    metrics = validate(
        run=run, prompt_set=None, rollout=cfg.rollout, seed=0, accuracy=cfg.judges_correctness
    )
    assert "eval/accuracy" not in metrics and metrics["eval/reward_mean"] == 0.5
    console = Console(record=True, width=200)
    sink = ConsoleSink(console, total_steps=2)
    sink.log(1, {"reward/mean": 0.5, "kl": 0.001, **metrics})
    shown = console.export_text()
    assert "reward 0.500" in shown and "acc" not in shown


def test_ranking_checkpoints_by_accuracy_without_a_correct_function_is_refused():
    overrides = [
        "reward.correct_function=null",
        "checkpoint.keep_best=true",
        "trainer.eval_every=5",
    ]
    with pytest.raises(ConfigError, match=r"validation logs no accuracy.*eval/reward_mean"):
        grouprl.load_config("tiny-arith", overrides)
    grouprl.load_config("tiny-arith", [*overrides, "checkpoint.best_metric=eval/reward_mean"])


# --- a sink's package ---------------------------------------------------------


def test_a_missing_wandb_is_found_before_anything_loads_with_the_install_command(monkeypatch):
    for name in ["wandb", *(m for m in sys.modules if m.startswith("wandb."))]:
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed (nor imported)
    with pytest.raises(ConfigError) as err:
        grouprl.load_config("tiny-arith", ["metrics.wandb.project=p"])
    text = str(err.value)
    assert "metrics.wandb.project='p'" in text and "wandb package is not installed" in text
    assert "pip install 'grouprl[wandb]'" in text and "EXTRAS=cpu,dev,mlflow,wandb" in text
    assert "metrics.wandb.project=null" in text
    assert RunConfig().metrics.wandb.project is None  # no sink, no check: loads
    grouprl.load_config("tiny-arith", [])


# --- docs/migration.md --------------------------------------------------------


def test_the_migration_rows_say_trls_defaults_and_where_the_std_is_set():
    doc = (ROOT / "docs" / "migration.md").read_text()
    (bias,) = [line for line in doc.splitlines() if line.startswith("| `use_bias_correction_kl`")]
    assert "TRL 1.16 defaults it to on" in bias and "off" in bias
    (scale,) = [line for line in doc.splitlines() if line.startswith("| `scale_rewards`")]
    assert "`algo.adv_std`" in scale and "`algo.adv_eps`" in scale
