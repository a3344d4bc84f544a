"""Drives multi-turn episodes: every episode of a batch advances one turn at a time,
and each turn's generation is one engine call over all episodes still running.

    rows ─► env.episode(row).start() ─► prompt ids ─► engine (n per prompt)
        ─► step(text) ─► observation ids ─► engine (the running episodes' contexts) ─► ...

A context is the prompt, then every turn's engine tokens and rendered
observation: exactly the tokens the trainer will see (``Trajectory.sequence_ids``).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from grouprl.data.prompts import chat_prompt_ids
from grouprl.envs.base import STOP_REASONS, Environment, Step, render_observation
from grouprl.rollout.base import RolloutEngine, SamplingSettings
from grouprl.types import Trajectory, Turn

ENV_WORKERS = 16  # episodes whose environment steps (tool calls) run at the same time


def run_episodes(
    *,
    engine: RolloutEngine,
    env: Environment,
    tokenizer,
    rows: list[dict[str, Any]],
    settings: SamplingSettings,
    max_turns: int,
    max_model_len: int,
) -> list[Trajectory]:
    """``settings.n`` episodes per row, prompt-major, each ending with a stop reason."""
    episodes = [env.episode(row) for row in rows for _ in range(settings.n)]
    first_messages = [episode.start() for episode in episodes][:: settings.n]
    template = env.template_kwargs
    prompts = [chat_prompt_ids(tokenizer, m, **template) for m in first_messages]
    trajectories: list[Trajectory] = []
    for turn in range(max_turns):
        if turn == 0:
            groups = engine.generate(prompts, settings)
            for row, prompt, group in zip(rows, prompts, groups, strict=True):
                for completion in group:
                    trajectories.append(
                        Trajectory(
                            prompt_index=row["_index"],
                            prompt_ids=prompt,
                            turns=[Turn(completion)],
                            weight_version=engine.weight_version,
                            row=row,
                        )
                    )
        else:
            running = [i for i, t in enumerate(trajectories) if not t.stop_reason]
            if not running:
                break
            contexts = [trajectories[i].sequence_ids() for i in running]
            turn_settings = replace(
                settings, n=1, seed=None if settings.seed is None else settings.seed + turn * 7919
            )
            for i, (completion,) in zip(
                running, engine.generate(contexts, turn_settings), strict=True
            ):
                trajectories[i].turns.append(Turn(completion))
        waiting = [
            i for i, t in enumerate(trajectories) if not t.stop_reason and len(t.turns) == turn + 1
        ]
        # the environments answer side by side: a slow tool call holds up only its episode
        with ThreadPoolExecutor(max_workers=ENV_WORKERS) as pool:
            steps = list(pool.map(lambda i: _step(trajectories[i], episodes[i]), waiting))
        for i, step in zip(waiting, steps, strict=True):
            traj = trajectories[i]
            if step is None or step.done:
                traj.stop_reason = "max_tokens" if step is None else step.stop_reason or "answered"
            elif turn + 1 == max_turns:
                traj.stop_reason = "max_turns"
            else:
                observation = render_observation(tokenizer, step.messages, **template)
                room = max_model_len - len(traj.sequence_ids()) - len(observation)
                if room < settings.max_tokens:
                    traj.stop_reason = "context_overflow"
                else:
                    traj.turns[-1].observation_ids = observation
    return trajectories


def _step(traj: Trajectory, episode) -> Step | None:
    """The environment's answer to the model's latest turn (recorded on the turn); None
    when the turn was cut off at the length limit, which ends the episode."""
    last = traj.turns[-1]
    if last.completion.finish_reason == "length":
        return None
    step = episode.step(last.completion.text)
    last.reward, last.info = step.reward, step.info
    return step


def episode_metrics(trajectories: list[Trajectory], *, prefix: str = "") -> dict[str, float]:
    """Turns, tool calls and tool errors per episode, and the share of each stop reason."""
    n = max(len(trajectories), 1)
    calls = sum(turn.info.get("tool_calls", 0) for t in trajectories for turn in t.turns)
    errors = sum(turn.info.get("tool_errors", 0) for t in trajectories for turn in t.turns)
    metrics = {
        f"{prefix}episode/turns": sum(len(t.turns) for t in trajectories) / n,
        f"{prefix}episode/tool_calls": calls / n,
        f"{prefix}episode/tool_error_rate": errors / calls if calls else 0.0,
    }
    for reason in STOP_REASONS:
        count = sum(t.stop_reason == reason for t in trajectories)
        metrics[f"{prefix}episode/stop/{reason}"] = count / n
    return metrics
