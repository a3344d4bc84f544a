"""Your environment in worker processes: each call with a deadline, and a failure costing
only the episode it hit: the episodes that shared its worker are replayed on the new one.

::

    driver (run_episodes threads)                  worker k  (WorkerPool, spawn; up to
                                                   env.concurrency calls at once, threads)
    env.episode(row) ── _start(id, row) ─────────► env = cls(**env.args)  (its first call)
                                                   episodes[id] = env.episode(row); .start()
    episode.step(text) ─ _step(id, text, turn) ──► episodes[id].step(text) -> Step
                       ◄─ None: not held here (the worker was replaced since)
                       ── _step(..., history=(row, texts)) ─► episode(row), start(), step(t)
                                                   for each earlier text t, then step(text)
        CallFailed, own (it raised, timed out,  ──► EnvFailure: this episode ends
          or was alone on a worker that died)
        CallFailed, not own (its worker died    ──► the same call once more, alone on its
          under several calls)                      worker, replayed; a second failure ends it
    episode.close() ── _close([id]) ─────────────► episodes.pop(id).close()

The driver keeps each episode's row and the texts it has sent, so an episode whose worker
was killed (another episode's step hung, crashed or ran out of memory) is rebuilt on the
replacement: the protocol says an episode is a function of its row and the model's turns
(``envs/base.py``). An environment with ``replayable = False`` cannot be rebuilt, so each
of its open episodes gets a one-worker pool of its own (lent from a free list, kept for
later episodes): a failure still costs one episode, for a process per open episode.

``run_episodes`` turns ``EnvFailure`` into the stop reason ``env_error`` (``env.on_error``:
left out of training by default, counted in ``episode/env_errors``, logged with the sample
and prompt index). The start call goes out when the episode is made, so it runs while the
engine generates turn 0. Each worker imports the environment's module as it starts and
builds the class in its first call (within that call's deadline, ``env.sandbox.timeout_s``).
"""

from __future__ import annotations

import functools
import itertools
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from grouprl.config.env import EnvConfig
from grouprl.config.model_data import DataConfig
from grouprl.envs.base import Message, Step, first_messages, replayable, template_kwargs_of
from grouprl.envs.loader import EnvTarget, build_user_env, resolve_env
from grouprl.sandbox.user_code import awaited_call

if TYPE_CHECKING:
    from grouprl.envs.base import Environment, Episode
    from grouprl.sandbox import CallFailed, WorkerPool

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

    def resolved(self) -> EnvTarget:
        """The target with its class: the worker imports it (a file: loads it) itself."""
        if self.target.kind != "import_path":
            return self.target
        return resolve_env(self.env_cfg.model_copy(update={"name": self.target.name}))

    def build(self) -> Environment:
        target = self.resolved()
        return build_user_env(target, self.env_cfg, self.data_cfg, cache_dir=self.cache_dir)

    def __reduce__(self):
        target = self.target
        if target.kind == "import_path":
            target = EnvTarget(kind=target.kind, name=target.name)
        return (EnvRecipe, (target, self.env_cfg, self.data_cfg, self.cache_dir))


# --- in the worker --------------------------------------------------------------------------


@runtime_checkable
class Closes(Protocol):
    """An episode that holds something until ``close()`` (optional: most hold nothing)."""

    def close(self) -> object: ...


_BUILDING = threading.Lock()  # the first calls of a worker arrive on several threads at once


def _state() -> dict[str, Any]:
    from grouprl.sandbox import worker_state

    return worker_state()


def _env(recipe: EnvRecipe) -> Environment:
    state = _state()
    with _BUILDING:
        if "env" not in state:
            state["episodes"] = {}  # id -> (episode, steps it has taken)
            state["env"] = recipe.build()
    return state["env"]


def _episodes(recipe: EnvRecipe) -> dict[int, tuple[Episode, int]]:
    _env(recipe)
    return _state()["episodes"]


def _import_at_start(recipe: EnvRecipe) -> None:
    """The pool's ``initializer``: the environment's module is imported before the worker
    takes calls, outside their deadlines (the class is built in the first call, within its
    deadline: a constructor may take longer than a worker's start may)."""
    recipe.resolved()


def _traits(recipe: EnvRecipe) -> tuple[dict[str, Any], bool]:
    env = _env(recipe)
    return template_kwargs_of(env), replayable(env)


def _openings(recipe: EnvRecipe, rows: list[dict[str, Any]]) -> list[list[Message]]:
    return first_messages(_env(recipe), rows)


def _start(recipe: EnvRecipe, episode_id: int, row: dict[str, Any]) -> list[Message]:
    episode = _env(recipe).episode(row)
    messages = awaited_call(episode.start)
    _episodes(recipe)[episode_id] = (episode, 0)
    return messages


def _step(
    recipe: EnvRecipe,
    episode_id: int,
    model_text: str,
    *,
    turn: int,
    history: tuple[dict[str, Any], list[str]] | None = None,
) -> Step | None:
    """The episode's answer to its ``turn``-th text (counting from 0). None: this worker
    does not hold the episode after ``turn`` steps and no ``history`` (its row and earlier
    texts) came to rebuild it from."""
    episodes = _episodes(recipe)
    held = episodes.get(episode_id)
    if held is None or held[1] != turn:
        if history is None:
            return None
        held = episodes[episode_id] = (_replayed(recipe, *history), turn)
    step = _checked(awaited_call(held[0].step, model_text))
    if step.done:
        _close_here(episodes, episode_id)
    else:
        episodes[episode_id] = (held[0], turn + 1)
    return step


def _replayed(recipe: EnvRecipe, row: dict[str, Any], texts: list[str]) -> Episode:
    """The episode rebuilt from its row and the texts it was sent (their answers, sent to
    the model before, are dropped)."""
    episode = _env(recipe).episode(row)
    awaited_call(episode.start)
    for text in texts:
        _checked(awaited_call(episode.step, text))
    return episode


def _checked(step: object) -> Step:
    if not isinstance(step, Step):
        raise TypeError(f"step() returned a {type(step).__name__}, not a grouprl.envs.Step")
    return step


def _close(episode_ids: list[int]) -> None:
    episodes = _state().get("episodes", {})
    for episode_id in episode_ids:
        _close_here(episodes, episode_id)


def _close_here(episodes: dict[int, tuple[Episode, int]], episode_id: int) -> None:
    episode, _ = episodes.pop(episode_id, (None, 0))
    if isinstance(episode, Closes):
        awaited_call(episode.close)


# --- in the driver --------------------------------------------------------------------------


class ContainedEnv:
    """An ``Environment`` whose episodes run in ``env.sandbox.workers`` worker processes
    (or, not replayable, in a process each)."""

    def __init__(self, recipe: EnvRecipe) -> None:
        cfg = recipe.env_cfg
        self.recipe, self.timeout_s = recipe, cfg.sandbox.timeout_s
        self.pool = self._new_pool(
            size=cfg.sandbox.workers, concurrency=cfg.concurrency, name="env"
        )
        self._ids = itertools.count()
        self._traits: tuple[dict[str, Any], bool] | None = None
        self._lock = threading.Lock()
        self._own: list[WorkerPool] = []  # not replayable: every episode's own pool, made so far
        self._free: list[WorkerPool] = []  # those no episode holds now

    @property
    def template_kwargs(self) -> dict[str, Any]:
        return self._known()[0]

    @property
    def replayable(self) -> bool:
        """The class's ``replayable`` (default True): whether a lost episode is rebuilt."""
        return self._known()[1]

    @property
    def steps_at_once(self) -> int | None:
        """Steps the workers take at once (workers x ``env.concurrency``); None: every open
        episode's (a process each)."""
        return self.pool.size * self.pool.concurrency if self.replayable else None

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
        if self.replayable:
            worker = episode_id % self.pool.size
            return ContainedEpisode(self, row, episode_id=episode_id, pool=self.pool, worker=worker)
        return ContainedEpisode(self, row, episode_id=episode_id, pool=self._lend(), worker=None)

    def close(self) -> None:
        for pool in [self.pool, *self._own]:
            pool.close()

    def _new_pool(self, *, size: int, concurrency: int, name: str) -> WorkerPool:
        from grouprl.sandbox import WorkerPool

        cfg = self.recipe.env_cfg
        return WorkerPool(
            cfg.sandbox.model_copy(update={"workers": size}),
            name=name,
            network=cfg.network,
            concurrency=concurrency,
            initializer=functools.partial(_import_at_start, self.recipe),
        )

    def _lend(self) -> WorkerPool:
        """A one-worker pool no open episode holds (a new one when none is free)."""
        with self._lock:
            if self._free:
                return self._free.pop()
            pool = self._new_pool(size=1, concurrency=1, name=f"env-episode-{len(self._own)}")
            self._own.append(pool)
            return pool

    def _give_back(self, pool: WorkerPool) -> None:
        with self._lock:
            self._free.append(pool)

    def _known(self) -> tuple[dict[str, Any], bool]:
        traits = self._traits
        if traits is None:
            fut = self.pool.submit(_traits, self.recipe, deadline_s=self.timeout_s)
            traits = self._traits = self._load_time(fut, "template_kwargs")
        return traits

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
    """One episode's handle in the driver: its row and the texts it was sent (to replay it);
    its object lives in worker ``worker`` of ``pool`` (None: a pool of its own)."""

    def __init__(
        self,
        env: ContainedEnv,
        row: dict[str, Any],
        *,
        episode_id: int,
        pool: WorkerPool,
        worker: int | None,
    ) -> None:
        self.env, self.row, self.id, self.pool, self.worker = env, row, episode_id, pool, worker
        self.texts: list[str] = []
        self._open, self._lent = True, worker is None
        self._messages: list[Message] | None = None
        self._started = self._submit(_start, env.recipe, episode_id, row)

    def start(self) -> list[Message]:
        messages = self._messages
        if messages is None:
            again = functools.partial(self._submit, _start, self.env.recipe, self.id, self.row)
            messages = self._messages = self._outcome(self._started, "start()", again=again)
        return messages

    def step(self, model_text: str) -> Step:
        self.start()
        send = functools.partial(
            self._submit, _step, self.env.recipe, self.id, model_text, turn=len(self.texts)
        )
        history = (self.row, list(self.texts))
        again = functools.partial(send, history=history)
        step = self._outcome(send(), "step()", again=again)
        if step is None:  # its worker was replaced since its last call
            if self.worker is None:
                raise EnvFailure(
                    "step(): its worker was replaced and lost the episode, and the "
                    "environment sets replayable = False"
                )
            step = self._outcome(again(), "step() (replayed on a new worker)", again=again)
        self.texts.append(model_text)
        self._open = not step.done
        return step

    def close(self) -> None:
        if self._open:
            self._open = False
            self._submit(_close, [self.id])
        if self._lent:
            self._lent = False
            self.env._give_back(self.pool)

    def _submit(self, fn, /, *args: object, alone: bool = False, **kwargs: Any) -> Future:
        """``fn`` on the episode's worker; a call that carries a history gets a deadline for
        each step it replays too."""
        history = kwargs.get("history")
        calls = 1 if history is None else 2 + len(history[1])  # start, earlier steps, this
        return self.pool.submit(
            fn,
            *args,
            deadline_s=calls * self.env.timeout_s,
            worker=self.worker,
            alone=alone,
            **kwargs,
        )

    def _outcome(self, fut: Future, what: str, *, again: Any) -> Any:
        """``fut``'s value. A failure that may not be this episode's (its worker died with
        other calls in flight) is tried ``again(alone=True)`` once, replayed: only a second
        failure is the episode's."""
        from grouprl.sandbox import CallFailed

        try:
            return fut.result()
        except CallFailed as err:
            if err.own or self.worker is None:
                raise self._ended(err, f"{what} {_failure_text(err)}") from err
        try:
            return again(alone=True).result()
        except CallFailed as err:
            text = f"{what} {_failure_text(err)}, run alone after its worker died"
            raise self._ended(err, text) from err

    def _ended(self, err: CallFailed, text: str) -> EnvFailure:
        if err.kind != "error":  # its worker is gone, and the episode with it: nothing to close
            self._open = False
        return EnvFailure(text)


def _failure_text(err: CallFailed) -> str:
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
