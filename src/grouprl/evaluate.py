"""Held-out evaluation: the same engine and reward functions as training, greedy by default."""

from __future__ import annotations

from grouprl.config.schema import RolloutConfig
from grouprl.rollout.base import RolloutEngine, SamplingSettings
from grouprl.rollout.runner import ScoreFn, collect
from grouprl.train.setup import PromptSet


def validate(
    *,
    engine: RolloutEngine,
    prompt_set: PromptSet,
    score: ScoreFn,
    rollout: RolloutConfig,
    correct_function: str | None,
    seed: int,
) -> dict[str, float]:
    settings = SamplingSettings(
        n=1,
        temperature=rollout.eval_temperature,
        top_p=rollout.top_p,
        top_k=rollout.top_k,
        max_tokens=rollout.max_tokens,
        seed=seed,
    )
    trajectories, scores = collect(
        engine=engine,
        prompts=prompt_set.prompts,
        rows=prompt_set.rows,
        settings=settings,
        score=score,
        correct_function=correct_function,
    )
    n = max(len(trajectories), 1)
    return {
        "eval/accuracy": sum(t.correct for t in trajectories) / n,
        "eval/reward_mean": sum(t.reward for t in trajectories) / n,
        "eval/response_len": sum(len(t.completion.token_ids) for t in trajectories) / n,
        "eval/reward_errors": float(len(scores.errors)),
    }
