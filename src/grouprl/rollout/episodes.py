"""Drives episodes, single- and multi-turn: every episode of a batch advances one turn at
a time, and each turn's generation is one engine call over all episodes still running
(``turns.py``: the engine calls, their seeds, ``env.max_turns`` and
``rollout.max_model_len``, as the gateway's agents have them too).

    rows ─► env.episode(row) ─► prompt ids ─► engine (n per prompt)
        ─► step(text) ─► observation ids ─► engine (the running episodes' contexts) ─► ...

A context is the prompt, then every turn's engine tokens and rendered
observation: exactly the tokens the trainer will see (``Trajectory.sequence_ids``). Each
token carries the weight version that sampled it (``Completion.versions``, from the
replica set): a turn after a weight push has the new one; the trajectory's
``weight_version`` is its first token's (``turns.first_version``).
Single-turn prompting is the environment whose every step ends the episode
(``envs/single_turn.py``): one engine call, no observation rendered. An environment in
this process (``env.sandbox.workers=0``) may have ``async def`` steps too: they run on the
process's one event loop (``sandbox/user_code.awaited_call``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from queue import Queue
from typing import Any

from grouprl.config.env_keys import STOP_REASONS
from grouprl.data.prompts import chat_prompt_ids
from grouprl.engines.base import RolloutEngine, SamplingSettings
from grouprl.envs.base import (
    Environment,
    Step,
    first_messages,
    render_observation,
    template_kwargs_of,
)
from grouprl.envs.contained import Closes, EnvFailure
from grouprl.rollout.gateway.record import gateway_metrics
from grouprl.rollout.turns import TurnEngine, TurnLimits, first_version
from grouprl.sandbox.user_code import awaited_call
from grouprl.types import Completion, Trajectory, Turn

logger = logging.getLogger(__name__)

GroupDone = Callable[[int, list[Trajectory]], None]
"""``on_group_done(first, group)``: the episodes ``first .. first + G - 1`` (one prompt's
group) have all ended (``run_episodes``)."""

ENV_WORKERS = 16
"""Episodes whose steps (tool calls) run at the same time in this process; a contained
environment says how many its workers take (``steps_at_once``: workers x env.concurrency)."""


def run_episodes(
    *,
    engine: RolloutEngine,
    env: Environment,
    tokenizer,
    rows: list[dict[str, Any]],
    settings: SamplingSettings,
    max_turns: int,
    max_model_len: int,
    prompts: list[list[int]] | None = None,
    on_group_done: GroupDone | None = None,
) -> list[Trajectory]:
    """``settings.group_size`` episodes per row, prompt-major, each ending with a stop reason.

    ``prompts``: the rows' prompt ids as rendered at load (``PromptSet``); None renders
    each row's opening through the chat template here. ``on_group_done(first, group)``
    (on this thread) as soon as every episode of a prompt's group has ended, while others
    go on: the first turns come from a ``ReplicaSet`` generating on a thread of its own,
    each group stepped as the engine finishes it (``ReplicaSet.generate``'s ``on_group``)."""
    episodes = [env.episode(row) for row in rows for _ in range(settings.group_size)]
    template = template_kwargs_of(env)
    if prompts is None:
        prompts = [chat_prompt_ids(tokenizer, m, **template) for m in first_messages(env, rows)]
    turns = TurnEngine(engine, settings)
    limits = TurnLimits(
        max_turns=max_turns,
        max_model_len=max_model_len,
        max_tokens=settings.max_tokens,
        whole_turns=True,  # the running episodes' turns go out in one call, at max_tokens
    )
    started = [False] * len(episodes)

    def answer(i: int) -> Step | None:
        first, started[i] = not started[i], True
        return _step(trajectories[i], episodes[i], sample=i, first=first)

    def render(messages: list[dict[str, Any]]) -> list[int]:
        return render_observation(tokenizer, messages, **template)

    G = settings.group_size
    trajectories: list[Trajectory] = []
    reported: set[int] = set()

    def step_all(indices: list[int]) -> None:
        # the environments answer side by side: a slow tool call holds up only its episode
        with ThreadPoolExecutor(max_workers=_steps_at_once(env, len(indices))) as pool:
            steps = list(pool.map(answer, indices))
        for i, step in zip(indices, steps, strict=True):
            _settle(trajectories[i], step, limits=limits, render=render)
        if on_group_done is not None:
            _report_ended(trajectories, indices, G, reported=reported, to=on_group_done)

    try:
        if on_group_done is None:
            trajectories = _first_turns(turns, rows=rows, prompts=prompts, group_size=G)
            step_all(list(range(len(trajectories))))
        else:
            trajectories = [Trajectory(0, [], [], 0)] * (len(rows) * G)  # filled as they arrive
            _stream_first_turns(turns, rows=rows, prompts=prompts, into=trajectories, then=step_all)
        while running := [i for i, t in enumerate(trajectories) if not t.stop_reason]:
            contexts = [trajectories[i].sequence_ids() for i in running]
            for i, (completion,) in zip(running, turns.generate(contexts), strict=True):
                trajectories[i].turns.append(Turn(completion))
            step_all(running)
    finally:
        for episode in episodes:
            if isinstance(episode, Closes):
                awaited_call(episode.close)
    return trajectories


def _steps_at_once(env: Environment, running: int) -> int:
    """Threads that call the running episodes' steps: as many as the environment takes at
    once (``steps_at_once``; None: every episode's), else ``ENV_WORKERS``."""
    at_once = getattr(env, "steps_at_once", ENV_WORKERS)
    return max(1, min(running, at_once or running))


def _first_turns(
    turns: TurnEngine, *, rows: list[dict[str, Any]], prompts: list[list[int]], group_size: int
) -> list[Trajectory]:
    """One engine call for ``group_size`` first turns per prompt, prompt-major."""
    groups = turns.generate(prompts, group_size=group_size)
    return [
        Trajectory(
            prompt_index=row["_index"],
            prompt_ids=prompt,
            turns=[Turn(completion)],
            weight_version=first_version(completion, turns.engine),
            row=row,
        )
        for row, prompt, group in zip(rows, prompts, groups, strict=True)
        for completion in group
    ]


def _report_ended(
    trajectories: list[Trajectory],
    indices: list[int],
    G: int,
    *,
    reported: set[int],
    to: GroupDone,
) -> None:
    """``to(first, group)`` for each group of ``indices`` whose episodes have all ended
    and that was not reported yet (``reported``, updated)."""
    for g in sorted({i // G for i in indices} - reported):
        group = trajectories[g * G : (g + 1) * G]
        if all(t.stop_reason for t in group):
            reported.add(g)
            to(g * G, group)


def _stream_first_turns(
    turns: TurnEngine,
    *,
    rows: list[dict[str, Any]],
    prompts: list[list[int]],
    into: list[Trajectory],
    then: Callable[[list[int]], None],
) -> None:
    """``_first_turns``' engine call on a thread of its own; each prompt's group, as the
    engine finishes it, goes into its place in ``into`` (``turns.settings.group_size`` per
    prompt), then ``then(its indices)`` runs on this thread. An error of either side is
    raised here once the engine call has returned."""
    group_size = turns.settings.group_size
    finished: Queue[tuple[int, list[Completion]] | BaseException | None] = Queue()

    def generate() -> None:
        try:
            turns.generate(
                prompts, group_size=group_size, on_group=lambda i, g: finished.put((i, g))
            )
            finished.put(None)
        except BaseException as err:  # raised on the consuming thread
            finished.put(err)

    thread = threading.Thread(target=generate, name="first-turns", daemon=True)
    thread.start()
    try:
        while (item := finished.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            i, group = item
            made = [
                Trajectory(
                    prompt_index=rows[i]["_index"],
                    prompt_ids=prompts[i],
                    turns=[Turn(completion)],
                    weight_version=first_version(completion, turns.engine),
                    row=rows[i],
                )
                for completion in group
            ]
            into[i * group_size : (i + 1) * group_size] = made
            then(list(range(i * group_size, (i + 1) * group_size)))
    finally:
        thread.join()


def _settle(
    traj: Trajectory,
    step: Step | None,
    *,
    limits: TurnLimits,
    render: Callable[[list[dict[str, Any]]], list[int]],
) -> None:
    """Ends the episode (a stop reason) or renders the environment's reply after the turn,
    when the next turn is within ``limits``."""
    if step is None or step.done:
        traj.stop_reason = "max_tokens" if step is None else step.stop_reason or "answered"
        return
    hit = limits.turn_limit(len(traj.turns))
    if hit is None:
        observation = render(step.messages)
        hit = limits.context_limit(len(traj.sequence_ids()) + len(observation))
        if hit is None:
            traj.turns[-1].observation_ids = observation
            return
    traj.stop_reason = hit.stop_reason


def _step(traj: Trajectory, episode, *, sample: int, first: bool) -> Step | None:
    """The environment's answer to the model's latest turn (recorded on the turn); None
    when the turn was cut off at the length limit, which ends the episode. ``first``: the
    episode starts (``start()``) before its first step."""
    last = traj.turns[-1]
    if last.completion.finish_reason == "length":
        return None
    try:
        if first:
            awaited_call(episode.start)
        step = awaited_call(episode.step, last.completion.text)
    except EnvFailure as err:
        logger.warning(
            "environment error in sample %d (prompt index %s), turn %d: %s; the episode "
            "ends as env_error (env.on_error: drop, zero or raise)",
            sample,
            traj.prompt_index,
            len(traj.turns) - 1,
            err,
        )
        step = Step(done=True, stop_reason="env_error", info={"env_error": str(err)})
    last.reward, last.info = step.reward, step.info
    return step


def episode_metrics(trajectories: list[Trajectory], *, prefix: str = "") -> dict[str, float]:
    """Turns, tool calls and tool errors per episode, the share of each stop reason, and
    the number of episodes the environment failed (``episode/env_errors``)."""
    n = max(len(trajectories), 1)
    calls = sum(turn.info.get("tool_calls", 0) for t in trajectories for turn in t.turns)
    errors = sum(turn.info.get("tool_errors", 0) for t in trajectories for turn in t.turns)
    metrics = {
        f"{prefix}episode/turns": sum(len(t.turns) for t in trajectories) / n,
        f"{prefix}episode/tool_calls": calls / n,
        f"{prefix}episode/tool_error_rate": errors / calls if calls else 0.0,
    }
    metrics[f"{prefix}episode/env_errors"] = float(
        sum(t.stop_reason == "env_error" for t in trajectories)
    )
    for reason in STOP_REASONS:
        count = sum(t.stop_reason == reason for t in trajectories)
        metrics[f"{prefix}episode/stop/{reason}"] = count / n
    metrics.update(gateway_metrics(trajectories, prefix=prefix))  # env.agent's episodes
    return metrics
