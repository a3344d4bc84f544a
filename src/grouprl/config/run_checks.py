"""Checks of the run-only sections' choices: ``checkpoint.best_metric`` names a metric
the validation logs, and ``checkpoint.keep_best`` needs validations to rank; a metrics
sink needs its package (found, not imported: this stays light)."""

from __future__ import annotations

import importlib.util

from grouprl.config.ckpt import CheckpointConfig
from grouprl.config.env_keys import STOP_REASONS
from grouprl.config.errors import show
from grouprl.config.schema import RunConfig

EPISODE_METRICS = ("turns", "tool_calls", "tool_error_rate", "env_errors")
"""``episode/...`` per episode (``rollout/episodes.episode_metrics``), then one
``episode/stop/REASON`` share per stop reason."""
GATEWAY_METRICS = (
    "calls",
    "history_rewrites",
    "tool_call_errors",
    "refused_calls",
    "reported_rewards",
    "agent_errors",
    "agent_timeouts",
    "agent_reruns",
)
"""``gateway/...`` per episode of ``env.agent`` (``rollout/gateway/record.gateway_metrics``)."""


def validation_metrics(cfg: RunConfig) -> list[str]:
    """The names every validation of ``cfg`` logs (``driver/evaluate.validate``), known
    without running it: ``eval/accuracy`` only when something judges correctness
    (``RunConfig.judges_correctness``), ``eval/gateway/...`` only with ``env.agent``.
    tests/unit/test_run_checks.py holds this list to what ``validate`` returns."""
    names = ["eval/reward_mean", "eval/response_len", "eval/reward_errors"]
    if cfg.judges_correctness:
        names.insert(0, "eval/accuracy")
    names += [f"eval/episode/{name}" for name in EPISODE_METRICS]
    names += [f"eval/episode/stop/{reason}" for reason in STOP_REASONS]
    if cfg.env.agent is not None:
        names += [f"eval/gateway/{name}" for name in GATEWAY_METRICS]
    return names


def run_problems(cfg: RunConfig) -> list[str]:
    return [*_best_metric_problems(cfg), *_keep_best_problems(cfg), *_sink_problems(cfg)]


def _sink_problems(cfg: RunConfig) -> list[str]:
    """The configured sinks whose package is missing: found with ``find_spec`` before any
    model loads (a converted verl recipe with `trainer.logger: [console, wandb]` sets
    ``metrics.wandb.project``), never imported here."""
    problems = []
    if cfg.metrics.mlflow.enabled and importlib.util.find_spec("mlflow") is None:
        problems.append(MLFLOW_MISSING)
    project = cfg.metrics.wandb.project
    if project is not None and importlib.util.find_spec("wandb") is None:
        problems.append(WANDB_MISSING.format(project=show(project)))
    return problems


MLFLOW_MISSING = (
    "metrics.mlflow.enabled=true logs to MLflow, but its package (mlflow-skinny) is not "
    "installed. Fix: pip install 'grouprl[mlflow]' (make install EXTRAS=cpu,dev,mlflow,graders), "
    "or metrics.mlflow.enabled=false."
)
WANDB_MISSING = (
    "metrics.wandb.project={project} logs to Weights & Biases, but the wandb package is not "
    "installed. Fix: pip install 'grouprl[wandb]' "
    "(make install EXTRAS=cpu,dev,mlflow,wandb,graders), or metrics.wandb.project=null."
)


def _best_metric_problems(cfg: RunConfig) -> list[str]:
    """``checkpoint.best_metric`` against the names the validation logs: checked with
    ``keep_best`` or when set away from its default (a misspelt name is refused either
    way); ``eval/accuracy`` without a correct function has its own message below."""
    ckpt = cfg.checkpoint
    default = CheckpointConfig.model_fields["best_metric"].default
    if not ckpt.keep_best and ckpt.best_metric == default:
        return []
    logged = validation_metrics(cfg)
    if ckpt.best_metric in logged or ckpt.best_metric == "eval/accuracy":
        return []
    return [
        f"checkpoint.best_metric={show(ckpt.best_metric)} is not a metric the validation "
        f"logs. This run's validation logs: {', '.join(logged)}. Fix: choose one of them, "
        "e.g. checkpoint.best_metric=eval/reward_mean."
    ]


def _keep_best_problems(cfg: RunConfig) -> list[str]:
    ckpt = cfg.checkpoint
    if not ckpt.keep_best:
        return []
    problems = []
    if ckpt.best_metric == "eval/accuracy" and not cfg.judges_correctness:
        problems.append(
            "checkpoint.best_metric=eval/accuracy, but reward.correct_function=null: nothing "
            "says an answer is correct, so validation logs no accuracy. Fix: set "
            "reward.correct_function to your function that scores 1.0 for a correct answer, "
            "or checkpoint.best_metric=eval/reward_mean."
        )
    if cfg.data.eval is None:
        problems.append(
            "checkpoint.keep_best=true ranks checkpoints by validation, but data.eval=null "
            "validates nothing. Fix: set data.eval (held-out prompts), or "
            "checkpoint.keep_best=false."
        )
    elif cfg.trainer.eval_every is None:
        problems.append(
            "checkpoint.keep_best=true ranks checkpoints by validation, but "
            "trainer.eval_every=null validates only after the last step, whose checkpoint "
            "is the newest anyway. Fix: set trainer.eval_every (e.g. 5), or "
            "checkpoint.keep_best=false."
        )
    return problems
