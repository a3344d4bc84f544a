"""Checks of the run-only sections' choices: ``checkpoint.keep_best`` needs validations
to rank; a metrics sink needs its package (found, not imported: this stays light)."""

from __future__ import annotations

import importlib.util

from grouprl.config.errors import show
from grouprl.config.schema import RunConfig

VALIDATION_METRICS = ("eval/accuracy", "eval/reward_mean", "eval/response_len")
"""What every validation logs (``driver/evaluate.validate``; ``eval/accuracy`` only when
something judges correctness, ``RunConfig.judges_correctness``); multi-turn runs add
``eval/episode/...``."""


def run_problems(cfg: RunConfig) -> list[str]:
    return [*_keep_best_problems(cfg), *_sink_problems(cfg)]


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
    "installed. Fix: pip install 'grouprl[mlflow]' (make install EXTRAS=cpu,dev,mlflow), "
    "or metrics.mlflow.enabled=false."
)
WANDB_MISSING = (
    "metrics.wandb.project={project} logs to Weights & Biases, but the wandb package is not "
    "installed. Fix: pip install 'grouprl[wandb]' (make install EXTRAS=cpu,dev,mlflow,wandb), "
    "or metrics.wandb.project=null."
)


def _keep_best_problems(cfg: RunConfig) -> list[str]:
    ckpt = cfg.checkpoint
    if not ckpt.keep_best:
        return []
    problems = []
    if not ckpt.best_metric.startswith("eval/"):
        problems.append(
            f"checkpoint.best_metric={show(ckpt.best_metric)} is not a validation metric. "
            f"Allowed: {', '.join(VALIDATION_METRICS)} (or another eval/ metric the "
            "validation logs). Fix: e.g. checkpoint.best_metric=eval/reward_mean."
        )
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
