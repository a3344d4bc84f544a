"""checkpoint.best_metric is checked against the metrics this run's validation logs
(config/run_checks.py), and that list is held to what ``validate`` returns."""

from __future__ import annotations

import pytest

import grouprl
from grouprl.config import ConfigError, load_config
from grouprl.config.run_checks import run_problems, validation_metrics
from grouprl.driver.evaluate import validate
from grouprl.rewards.scoring import RewardScores
from grouprl.rollout.gateway.record import EpisodeRecord
from grouprl.types import Completion, Trajectory, Turn

KEEP_BEST = ["checkpoint.keep_best=true"]  # tiny-arith validates every 10 steps


@pytest.mark.parametrize("keep_best", [KEEP_BEST, []], ids=["keep_best", "without"])
def test_an_unknown_best_metric_is_refused_with_the_names_validation_logs(keep_best):
    with pytest.raises(ConfigError) as err:
        grouprl.load_config("tiny-arith", [*keep_best, "checkpoint.best_metric=eval/nope"])
    text = str(err.value)
    assert text.startswith("checkpoint.best_metric='eval/nope' is not a metric the validation")
    logged = text.split("This run's validation logs: ")[1].split(". Fix: ")[0]
    cfg = load_config("tiny-arith", [])
    assert logged.split(", ") == validation_metrics(cfg)
    assert "Fix: choose one of them, e.g. checkpoint.best_metric=eval/reward_mean" in text


def test_any_metric_validation_logs_ranks_checkpoints():
    for name in ("eval/reward_mean", "eval/response_len", "eval/episode/turns"):
        grouprl.load_config("tiny-arith", [*KEEP_BEST, f"checkpoint.best_metric={name}"])


def test_the_gateway_metrics_rank_only_runs_with_an_agent():
    gateway = ["checkpoint.best_metric=eval/gateway/calls", *KEEP_BEST]
    with pytest.raises(ConfigError, match="'eval/gateway/calls' is not a metric"):
        grouprl.load_config("tiny-arith", gateway)
    assert run_problems(load_config("tiny-arith", [*gateway, "env.agent=a.py:solve"])) == []


def test_the_default_best_metric_is_not_checked_until_keep_best_ranks_by_it():
    no_accuracy = ["reward.correct_function=null"]  # validation logs no eval/accuracy
    assert run_problems(load_config("tiny-arith", no_accuracy)) == []
    with pytest.raises(ConfigError, match="validation logs no accuracy"):
        grouprl.load_config("tiny-arith", [*no_accuracy, *KEEP_BEST])


def _trajectory(*, gateway: bool) -> Trajectory:
    completion = Completion(token_ids=[1, 2], logprobs=[0.0, 0.0], finish_reason="stop")
    info = {}
    if gateway:  # the counts an agent's episode carries (rollout/gateway/record.py)
        record = EpisodeRecord(key="k", index=0, row={}, eos_id=None)
        info = {"gateway": record.summary(failure=None)}
    return Trajectory(
        prompt_index=0,
        prompt_ids=[0],
        turns=[Turn(completion, info=info)],
        weight_version=0,
        reward=1.0,
        correct=True,
        stop_reason="answered",
    )


@pytest.mark.parametrize(
    "overrides",
    [[], ["reward.correct_function=null"], ["env.agent=a.py:solve"]],
    ids=["single_turn", "no_correct_function", "agent"],
)
def test_validation_metrics_are_the_names_validate_logs(overrides):
    cfg = load_config("tiny-arith", overrides)
    agent = cfg.env.agent is not None

    def run(prompt_set, settings):
        return [_trajectory(gateway=agent)] * 2, RewardScores(total=[1.0, 1.0], parts={})

    logged = validate(
        run=run, prompt_set=None, rollout=cfg.rollout, seed=0, accuracy=cfg.judges_correctness
    )
    assert sorted(logged) == sorted(validation_metrics(cfg))
