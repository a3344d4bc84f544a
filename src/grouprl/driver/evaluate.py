"""Held-out evaluation: the same engine and reward functions as training, greedy by default."""

from __future__ import annotations

from pathlib import Path

from grouprl.config.rollout import RolloutConfig
from grouprl.config.schema import RunConfig
from grouprl.engines.base import SamplingSettings
from grouprl.rewards.scoring import extra_metrics
from grouprl.rollout.episodes import episode_metrics
from grouprl.rollout.setup import PromptSet, RolloutFn


def validate(
    *,
    run: RolloutFn,
    prompt_set: PromptSet,
    rollout: RolloutConfig,
    seed: int,
    accuracy: bool = True,
) -> dict[str, float]:
    """One episode per held-out prompt (greedy unless ``rollout.eval_temperature``).
    ``accuracy``: whether something judges correctness (``RunConfig.judges_correctness``);
    without it ``eval/accuracy`` is left out rather than logged as 0."""
    settings = SamplingSettings(
        group_size=1,
        temperature=rollout.eval_temperature,
        top_p=rollout.top_p,
        top_k=rollout.top_k,
        max_tokens=rollout.max_tokens,
        seed=seed,
    )
    trajectories, scores = run(prompt_set, settings)
    n = max(len(trajectories), 1)
    metrics = {
        **({"eval/accuracy": sum(t.correct for t in trajectories) / n} if accuracy else {}),
        "eval/reward_mean": sum(t.reward for t in trajectories) / n,
        "eval/response_len": sum(t.generated_tokens for t in trajectories) / n,
        "eval/reward_errors": float(len(scores.errors)),
    }
    metrics.update(episode_metrics(trajectories, prefix="eval/"))
    metrics.update({f"eval/{k}": v for k, v in extra_metrics(scores).items()})
    return metrics


def evaluate_cli(target: str, cfg: RunConfig) -> dict[str, float]:
    """`grouprl eval TARGET`: score a run's newest checkpoint, or a model, on ``data.eval``.
    The rollout side (``RolloutBuilder``) closes when the scoring ends, by an error or not;
    a part that fails to start leaves none of the others running."""
    import json

    import torch

    from grouprl.device import resolve_device
    from grouprl.rollout.builder import RolloutBuilder
    from grouprl.runtime import quiet_libraries
    from grouprl.workers.model import load_tokenizer

    if cfg.data.eval is None:
        raise EvalError("data.eval is null: set data.eval.source (and split) to evaluate on.")
    run_dir = _point_at_model(target, cfg)
    quiet_libraries()
    device = resolve_device(cfg.train.device)
    tokenizer = load_tokenizer(cfg.model)
    cache = run_dir / "cache" if run_dir is not None else Path("runs") / ".cache"
    with RolloutBuilder(cfg, tokenizer=tokenizer, device=device, cache_dir=cache) as side:
        side.environment()
        prompt_set = side.prompt_set(cfg.data.eval, config_key="data.eval")
        parts = side.start()
        with torch.no_grad():
            metrics = validate(
                run=parts.rollout,
                prompt_set=prompt_set,
                rollout=cfg.rollout,
                seed=cfg.train.seed,
                accuracy=cfg.judges_correctness,
            )
    print(f"model: {cfg.model.path}")
    print(
        f"held-out accuracy: {_accuracy_text(metrics)}  "
        f"mean reward: {metrics['eval/reward_mean']:.3f}  ({len(prompt_set)} prompts)"
    )
    if run_dir is not None:
        (run_dir / "eval.json").write_text(json.dumps(metrics, indent=2))
    return metrics


def _point_at_model(target: str, cfg: RunConfig) -> Path | None:
    """Sets ``model.path`` to ``target``'s model: a run's newest checkpoint, exported to
    the run's cache once, or the model ``target`` names. Returns the run's directory."""
    from grouprl.ckpt.export import export_checkpoint, find_checkpoint
    from grouprl.driver.eval_inputs import run_dir_of_target

    run_dir = run_dir_of_target(target)
    if run_dir is None:
        cfg.model.path = target
        return None
    ckpt = find_checkpoint(run_dir)
    exported = run_dir / "cache" / "export" / ckpt.name
    if not (exported / "config.json").is_file():
        export_checkpoint(ckpt, exported)
    cfg.model.path = str(exported)
    return run_dir


def _accuracy_text(metrics: dict[str, float]) -> str:
    if "eval/accuracy" not in metrics:
        return "n/a (reward.correct_function=null)"
    return f"{metrics['eval/accuracy']:.3f}"


class EvalError(ValueError):
    user_error = True
