"""Rollout setup shared by training and evaluation: prompt sets, the scorer, the engine,
and the function that turns a prompt set into scored episodes."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grouprl.assets import resolve_model_path
from grouprl.config.schema import DataConfig, DataSource, RewardConfig, RunConfig
from grouprl.data.prompts import chat_prompt_ids, render_prompts
from grouprl.data.sources import load_rows
from grouprl.envs.base import Environment
from grouprl.rewards.registry import resolve_rewards
from grouprl.rewards.scoring import RewardRunner, RewardScores, score_completions
from grouprl.rollout.base import RolloutEngine, SamplingSettings
from grouprl.rollout.episodes import run_episodes
from grouprl.rollout.replicas import ReplicaSet, in_driver, start_replicas
from grouprl.rollout.runner import ScoreFn, collect, score_trajectories
from grouprl.types import Trajectory


@dataclass
class PromptSet:
    """Rendered prompt token ids and their dataset rows, index-aligned."""

    prompts: list[list[int]]
    rows: list[dict[str, Any]]

    def __len__(self) -> int:
        return len(self.prompts)

    def take(self, positions: list[int]) -> PromptSet:
        return PromptSet([self.prompts[i] for i in positions], [self.rows[i] for i in positions])


def load_prompt_set(
    source: DataSource,
    *,
    tokenizer,
    data: DataConfig,
    config_key: str,
    env: Environment | None = None,
) -> PromptSet:
    """The rows of ``source`` and their prompt ids: the question through the data keys, or
    an environment's first observation (so ``data.max_prompt_tokens`` measures what the
    engine receives)."""
    rows = load_rows(
        source, prompt_key=data.prompt_key, answer_key=data.answer_key, config_key=config_key
    )
    render = None
    if env is not None:

        def render(row: dict[str, Any]) -> list[int]:
            return chat_prompt_ids(tokenizer, env.episode(row).start(), **env.template_kwargs)

    prompts, kept = render_prompts(tokenizer, rows, data_cfg=data, render=render)
    return PromptSet(prompts, kept)


def make_score_fn(reward: RewardConfig, *, answer_key: str) -> ScoreFn:
    return functools.partial(
        score_completions,
        functions=resolve_rewards(reward.functions),
        runner=RewardRunner(),
        answer_key=answer_key,
        on_error=reward.on_error,
        timeout_s=reward.timeout_s,
    )


RolloutFn = Callable[[PromptSet, SamplingSettings], tuple[list[Trajectory], RewardScores]]


def make_rollout(
    cfg: RunConfig,
    *,
    engine: RolloutEngine,
    tokenizer,
    score: ScoreFn,
    env: Environment | None,
) -> RolloutFn:
    """Episodes for a prompt set, scored: single completions, or multi-turn episodes in
    ``env`` (the configured environment, ``make_env``)."""
    correct = cfg.reward.correct_function

    def run(prompt_set: PromptSet, settings: SamplingSettings):
        if env is None:
            return collect(
                engine=engine,
                prompts=prompt_set.prompts,
                rows=prompt_set.rows,
                settings=settings,
                score=score,
                correct_function=correct,
            )
        trajectories = run_episodes(
            engine=engine,
            env=env,
            tokenizer=tokenizer,
            rows=prompt_set.rows,
            settings=settings,
            max_turns=cfg.env.max_turns,
            max_model_len=cfg.rollout.max_model_len,
        )
        return trajectories, score_trajectories(trajectories, score=score, correct_function=correct)

    return run


def start_engine(
    cfg: RunConfig,
    *,
    tokenizer,
    device,
    cache_dir: Path,
    places: list[dict[str, Any]] | None = None,
) -> ReplicaSet:
    """The configured rollout engines over ``model.path``: replicas in Ray actors on the
    nodes of the training ranks at ``places`` (``rollout.placement``), or one engine here
    on ``device``."""
    model_dir = resolve_model_path(cfg.model.path)
    if cfg.rollout_in_actors:
        return start_replicas(
            cfg,
            model_dir=str(model_dir),
            cache_dir=str(cache_dir),
            places=places or [],
            on_gpu=device.type == "cuda",
        )
    from grouprl.rollout.engines import make_engine

    return in_driver(
        make_engine(
            cfg, model_dir=model_dir, tokenizer=tokenizer, device=device, cache_dir=cache_dir
        )
    )
