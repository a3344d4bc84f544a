"""Rollout setup shared by training and evaluation: prompt sets, the scorer, the engine,
and the function that turns a prompt set into scored episodes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from grouprl.assets import resolve_model_path
from grouprl.config.containment import OnError
from grouprl.config.model_data import DataConfig, DataSource
from grouprl.config.schema import RunConfig
from grouprl.data.prompts import render_conversations, render_prompts
from grouprl.data.sources import load_rows
from grouprl.engines.base import RolloutEngine, SamplingSettings
from grouprl.engines.placement import in_driver, start_replicas
from grouprl.engines.replicas import ReplicaSet
from grouprl.envs.base import Environment, first_messages, template_kwargs_of
from grouprl.envs.single_turn import SingleTurnEnv
from grouprl.rewards.scoring import RewardScores
from grouprl.rollout.episode_scores import GroupScoring, ScoreFn, score_trajectories
from grouprl.rollout.episodes import run_episodes
from grouprl.rollout.reward import fail
from grouprl.rollout.teacher_scores import TimedTeacher
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
    max_staleness: int = 0,
    answer_fields: tuple[str, ...] = (),
    check_rows: Callable[[list[dict[str, Any]]], None] | None = None,
) -> PromptSet:
    """The rows of ``source`` and their prompt ids: each row's opening in ``env`` (by
    default single-turn prompting: the question through the data keys), so
    ``data.max_prompt_tokens`` measures what the engine receives. ``max_staleness`` >= 1:
    the rows go into JSON checkpoints, checked as they load (``load_rows``).
    ``answer_fields``: ``load_rows``'; ``check_rows`` raises on rows that would not train,
    before any prompt renders (``row_checks.loaded_problems``)."""
    rows = load_rows(
        source,
        prompt_key=data.prompt_key,
        answer_key=data.answer_key,
        config_key=config_key,
        max_staleness=max_staleness,
        answer_fields=answer_fields,
    )
    if check_rows is not None:
        check_rows(rows)
    env = env if env is not None else SingleTurnEnv.from_data(data)

    def render(rows: list[dict[str, Any]]) -> list[list[int]]:
        openings = first_messages(env, rows)
        return render_conversations(tokenizer, openings, **template_kwargs_of(env))

    prompts, kept = render_prompts(tokenizer, rows, data_cfg=data, render=render)
    return PromptSet(prompts, kept)


RolloutFn = Callable[[PromptSet, SamplingSettings], tuple[list[Trajectory], RewardScores]]


def make_rollout(
    cfg: RunConfig,
    *,
    engine: RolloutEngine,
    tokenizer,
    score: ScoreFn,
    env: Environment,
    teacher: TimedTeacher | None = None,
) -> RolloutFn:
    """Episodes for a prompt set in ``env`` (the configured environment, ``make_env``),
    scored: the reward functions score each episode's last turn; a sample whose
    environment (``env_error``) or reward function (``reward_error``) failed is dropped,
    trained as 0 or raises, as ``env.on_error`` and ``reward.on_error`` say. With
    ``rollout.max_staleness`` >= 1 each group is scored as soon as its episodes end, on a
    thread of its own, while the engine generates the rest (``GroupScoring``): a slow
    reward (a judge, a reward model) runs alongside generation, and so do the calls to
    the distillation ``teacher``; otherwise the round is scored at once after its
    episodes, in one call (and the teacher is asked by ``driver/rollouts``)."""
    if cfg.env.agent is not None:  # your own agent, through the gateway (docs/gateway.md)
        from grouprl.rollout.gateway.agents import AgentRollout

        return AgentRollout(cfg, engine=engine, tokenizer=tokenizer, score=score)
    correct, on_error = cfg.reward.correct_function, cfg.reward.on_error
    by_group = cfg.rollout.max_staleness >= 1 and isinstance(engine, ReplicaSet)

    def run(prompt_set: PromptSet, settings: SamplingSettings):
        groups = (
            GroupScoring(score=score, correct_function=correct, on_error=on_error, teacher=teacher)
            if by_group
            else None
        )
        try:
            trajectories = run_episodes(
                engine=engine,
                env=env,
                tokenizer=tokenizer,
                rows=prompt_set.rows,
                prompts=prompt_set.prompts,
                settings=settings,
                max_turns=cfg.env.max_turns,
                max_model_len=cfg.rollout.max_model_len,
                on_group_done=groups.submit if groups is not None else None,
            )
            scores = (
                groups.result()
                if groups is not None
                else score_trajectories(
                    trajectories,
                    score=score,
                    correct_function=correct,
                    group_size=settings.group_size,
                    on_error=on_error,
                )
            )
        finally:
            if groups is not None:
                groups.close()
        zero_failed_episodes(trajectories, on_error=cfg.env.on_error)
        return trajectories, scores

    return run


def zero_failed_episodes(trajectories: list[Trajectory], *, on_error: OnError = "drop") -> None:
    """Episodes the environment failed (``env_error``) are failed samples
    (``rollout/reward.fail``, as ``env.on_error`` says): the failure is the
    environment's, not the policy's."""
    for i, traj in enumerate(trajectories):
        if traj.stop_reason == "env_error":
            error = traj.turns[-1].info.get("env_error", "")
            fail(traj, reason="env_error", on_error=on_error, message=error, sample=i)


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
    decode = partial(tokenizer.decode, skip_special_tokens=True)  # as the engines decode
    if cfg.rollout_in_actors:
        return start_replicas(
            cfg,
            model_dir=str(model_dir),
            cache_dir=str(cache_dir),
            places=places or [],
            on_gpu=device.type == "cuda",
            decode=decode,
        )
    from grouprl.engines.build import make_engine

    return in_driver(
        make_engine(
            cfg, model_dir=model_dir, tokenizer=tokenizer, device=device, cache_dir=str(cache_dir)
        ),
        segment_tokens=cfg.rollout.partial_rollout_tokens,
        decode=decode,
        max_model_len=cfg.rollout.max_model_len,
    )
