"""Your environment in worker processes: each episode pinned to one worker, each call
with a deadline, a failure ending only the episode it hit.

::

    driver (run_episodes threads)                 worker k  (WorkerPool, spawn)
    env.episode(row) ─ submit _start(id, row) ──► env = cls(**env.args)   (once per worker)
                                                  episodes[id] = env.episode(row); .start()
    episode.step(text) ─ submit _step(id, text) ─► episodes[id].step(text) -> Step
        CallFailed (raised, timed out, crashed,  ◄─ worker killed past env.sandbox.timeout_s,
        state lost) ──► EnvFailure                  replaced; its episodes are lost
    episode.close() ─── submit _close([id]) ────► episodes.pop(id)

``run_episodes`` turns ``EnvFailure`` into the stop reason ``env_error`` (reward 0,
counted in ``episode/env_errors``, logged with the sample and prompt index). The start
call goes out when the episode is made, so it runs while the engine generates turn 0.
The class is built once per worker, inside that worker's first call (and its deadline).
"""

from __future__ import annotations

import itertools
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from grouprl.config.schema import DataConfig, EnvConfig
from grouprl.envs.base import Message, Step, first_messages, template_kwargs_of
from grouprl.envs.loader import EnvTarget, build_user_env, resolve_env

OPENING_CHUNK = 256
"""Rows whose opening messages one worker call renders (at load time)."""


class EnvFailure(Exception):
    """A contained environment call that returned nothing: the message says why (one line)."""


class EnvError(ValueError):
    """The environment failed where the run cannot go on without it (rendering the
    prompts at load time); the message names ``env.name`` and the failure."""

    user_error = True


@dataclass(frozen=True)
class EnvRecipe:
    """How a worker builds the environment: picklable (a class by import path travels as
    its name; a registered factory by reference)."""

    target: EnvTarget
    env_cfg: EnvConfig
    data_cfg: DataConfig
    cache_dir: str

    def build(self) -> Any:
        target = self.target
        if target.kind == "import_path":  # the worker imports it (a file: loads it) itself
            target = resolve_env(self.env_cfg.model_copy(update={"name": target.name}))
        return build_user_env(target, self.env_cfg, self.data_cfg, cache_dir=self.cache_dir)

    def __reduce__(self):
        target = self.target
        if target.kind == "import_path":
            target = EnvTarget(kind=target.kind, name=target.name)
        return (EnvRecipe, (target, self.env_cfg, self.data_cfg, self.cache_dir))


# --- in the worker --------------------------------------------------------------------------


def _state() -> dict[str, Any]:
    from grouprl.sandbox import worker_state

    return worker_state()


def _env(recipe: EnvRecipe) -> Any:
    state = _state()
    if "env" not in state:
        state["env"] = recipe.build()
        state["episodes"] = {}
    return state["env"]


def _openings(recipe: EnvRecipe, rows: list[dict[str, Any]]) -> list[list[Message]]:
    return first_messages(_env(recipe), rows)


def _template_kwargs(recipe: EnvRecipe) -> dict[str, Any]:
    return template_kwargs_of(_env(recipe))


def _start(recipe: EnvRecipe, episode_id: int, row: dict[str, Any]) -> list[Message]:
    episode = _env(recipe).episode(row)
    messages = episode.start()
    _state()["episodes"][episode_id] = episode
    return messages


def _step(episode_id: int, model_text: str) -> Step:
    episodes = _state().get("episodes", {})
    episode = episodes.get(episode_id)
    if episode is None:
        raise LookupError("its worker was restarted and lost the episode's state")
    step = episode.step(model_text)
    if not isinstance(step, Step):
        raise TypeError(f"step() returned a {type(step).__name__}, not a grouprl.envs.Step")
    if step.done:
        _close_here(episodes, episode_id)
    return step


def _close(episode_ids: list[int]) -> None:
    episodes = _state().get("episodes", {})
    for episode_id in episode_ids:
        _close_here(episodes, episode_id)


def _close_here(episodes: dict[int, Any], episode_id: int) -> None:
    episode = episodes.pop(episode_id, None)
    close = getattr(episode, "close", None)
    if close is not None:
        close()


# --- in the driver --------------------------------------------------------------------------


class ContainedEnv:
    """An ``Environment`` whose episodes run in ``env.sandbox.workers`` worker processes."""

    def __init__(self, recipe: EnvRecipe) -> None:
        from grouprl.sandbox import WorkerPool

        sandbox = recipe.env_cfg.sandbox
        self.recipe, self.timeout_s, self.workers = recipe, sandbox.timeout_s, sandbox.workers
        self.pool = WorkerPool(
            size=sandbox.workers, memory_mb=sandbox.memory_mb, concurrency=1, name="env"
        )
        self._ids = itertools.count()
        self._template: dict[str, Any] | None = None

    @property
    def template_kwargs(self) -> dict[str, Any]:
        template = self._template
        if template is None:
            fut = self.pool.submit(_template_kwargs, self.recipe, deadline_s=self.timeout_s)
            template = self._template = self._load_time(fut, "template_kwargs")
        return template

    def openings(self, rows: list[dict[str, Any]]) -> list[list[Message]]:
        """Each row's opening messages, ``OPENING_CHUNK`` rows a call, the workers side by side."""
        chunks = [rows[i : i + OPENING_CHUNK] for i in range(0, len(rows), OPENING_CHUNK)]
        futures = [
            self.pool.submit(_openings, self.recipe, chunk, deadline_s=self.timeout_s)
            for chunk in chunks
        ]
        out: list[list[Message]] = []
        for chunk, fut in zip(chunks, futures, strict=True):
            first, last = chunk[0].get("_index"), chunk[-1].get("_index")
            where = f"episode(row).start() for rows {first}-{last}"
            out += self._load_time(fut, where)
        return out

    def episode(self, row: dict[str, Any]) -> ContainedEpisode:
        episode_id = next(self._ids)
        return ContainedEpisode(self, row, episode_id=episode_id, worker=episode_id % self.workers)

    def close(self) -> None:
        self.pool.close()

    def _load_time(self, fut: Future, what: str) -> Any:
        from grouprl.sandbox import CallFailed

        try:
            return fut.result()
        except CallFailed as err:
            raise EnvError(
                f"env.name={self.recipe.target.name!r}: {what} failed in its worker "
                f"({err.message}); the prompts cannot be rendered without it. Fix the "
                f"environment, or raise env.sandbox.timeout_s={self.timeout_s:g} if it is slow"
            ) from err


class ContainedEpisode:
    """One episode's handle in the driver; its object lives in worker ``worker``."""

    def __init__(self, env: ContainedEnv, row: dict[str, Any], *, episode_id: int, worker: int):
        self.env, self.id, self.worker = env, episode_id, worker
        self._open = True
        self._started = env.pool.submit(
            _start, env.recipe, episode_id, row, deadline_s=env.timeout_s, worker=worker
        )
        self._generation: int | None = None

    def start(self) -> list[Message]:
        messages = self._wait(self._started, "start()")
        if self._generation is None:
            self._generation = self.env.pool.generation(self.worker)
        return messages

    def step(self, model_text: str) -> Step:
        self.start()
        if self.env.pool.generation(self.worker) != self._generation:
            self._open = False
            raise EnvFailure("step(): its worker was restarted and lost the episode's state")
        fut = self.env.pool.submit(
            _step, self.id, model_text, deadline_s=self.env.timeout_s, worker=self.worker
        )
        step = self._wait(fut, "step()")
        self._open = not step.done
        return step

    def close(self) -> None:
        if self._open:
            self._open = False
            pool, timeout_s = self.env.pool, self.env.timeout_s
            pool.submit(_close, [self.id], deadline_s=timeout_s, worker=self.worker)

    def _wait(self, fut: Future, what: str) -> Any:
        from grouprl.sandbox import CallFailed

        try:
            return fut.result()
        except CallFailed as err:
            if err.kind != "error":  # the worker is gone, and the episode with it
                self._open = False
            raise EnvFailure(f"{what} {_failure_text(err)}") from err


def _failure_text(err: Any) -> str:
    if err.kind == "error":
        return f"raised {err.message}"
    if err.kind == "timeout":
        return f"timed out ({err.message})"
    return f"failed: {err.message}"


def contain(target: EnvTarget, cfg: EnvConfig, data: DataConfig, *, cache_dir: str) -> ContainedEnv:
    """The user's environment in ``cfg.sandbox.workers`` workers (``resolve_env`` refused a
    registered factory that cannot reach them: ``sandbox/user_code.py``)."""
    recipe = EnvRecipe(target=target, env_cfg=cfg, data_cfg=data, cache_dir=str(cache_dir))
    return ContainedEnv(recipe)
