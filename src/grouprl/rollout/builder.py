"""The builder of a run's rollout parts, which starts them one by one and closes them in
reverse order: one for training (``driver/run.py``), evaluation (``driver/evaluate.py``)
and so the Python API, which goes through them.

::

    with RolloutBuilder(cfg, tokenizer=tok, device=device, cache_dir=cache) as builder:
        builder.environment()       env.name's environment (a contained one: its workers)
        builder.prompt_set(...)     prompt token ids, each row's opening in the environment
        builder.closing(group)      the caller's own parts (the training ranks) join the order
        builder.start(places=...)   the engine or its replicas (Ray actors), the scorer (its
                                    reward workers), the rollout function (env.agent's workers;
                                    its episodes' failure brake: rollout/episode_brake.py),
                                    with teacher=True the distillation teacher's engines
        ... the run ...
    leaving the block, by an error or not: every part that started is closed, the newest
    first; a part that fails to start leaves none of the others running, and its error
    reaches the caller unchanged

A part is closed because its type has ``close()`` (``Closeable``), never because an
attribute happens to be there: the engines (``ReplicaSet``), the scorer (``TimedScore``)
and the caller's parts always; the environment and the rollout function when theirs
does (a contained environment, an agent's rollout).
"""

from __future__ import annotations

import logging
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from grouprl.config.model_data import DataSource
from grouprl.config.schema import RunConfig
from grouprl.data.sources import DataError
from grouprl.engines.replicas import ReplicaSet
from grouprl.envs.base import Environment
from grouprl.envs.factory import make_env
from grouprl.rewards.scoring import RewardScorer
from grouprl.rollout.episode_brake import with_episode_brake
from grouprl.rollout.episode_scores import TimedScore
from grouprl.rollout.row_checks import answer_fields, check_loaded_rows, too_few_rows
from grouprl.rollout.setup import (
    PromptSet,
    RolloutFn,
    load_prompt_set,
    make_rollout,
    start_engine,
)
from grouprl.rollout.teacher_scores import TimedTeacher
from grouprl.runtime import shared_cache

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)


@runtime_checkable
class Closeable(Protocol):
    """A part that holds processes, threads, actors or memory until ``close()``."""

    def close(self) -> None: ...


C = TypeVar("C", bound=Closeable)
T = TypeVar("T")


@dataclass(frozen=True)
class RolloutParts:
    """What ``RolloutBuilder.start`` started: they close with the builder's block."""

    engine: ReplicaSet  # one engine in this process, or replicas in Ray actors
    score: TimedScore  # the reward functions in their worker processes, timed
    rollout: RolloutFn  # episodes for a prompt set, scored (single-, multi-turn, agent)
    teacher: TimedTeacher | None = None  # the distillation teacher (algo.teacher_coef > 0)


class RolloutBuilder:
    """Builds the rollout parts of a run inside a ``with`` block (an ``ExitStack``), which
    closes each part it started, and each part given to ``closing``, in reverse order."""

    def __init__(
        self, cfg: RunConfig, *, tokenizer: Any, device: torch.device, cache_dir: Path
    ) -> None:
        """``cache_dir``: the engines' (the run's ``cache`` folder); the environment's is
        the one runs share (``runtime.shared_cache``)."""
        self.cfg, self.tokenizer, self.device, self.cache_dir = cfg, tokenizer, device, cache_dir
        self.env: Environment | None = None
        self._stack = ExitStack()

    def __enter__(self) -> RolloutBuilder:
        self._stack.__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        """Closes the parts, newest first; an error leaving the block is raised on as it is
        (the parts' callbacks return nothing, so the stack never swallows it)."""
        self._stack.__exit__(*exc_info)

    def closing(self, part: C) -> C:
        """``part``, closed when the block exits, before every part started earlier."""
        self._stack.callback(part.close)
        return part

    def environment(self) -> Environment:
        """The environment ``env.name`` names; a contained one's worker processes close
        with the block. Build it before the prompt sets, which it renders."""
        cfg = self.cfg
        self.env = self._closing_if_closeable(
            make_env(cfg.env, cfg.data, cache_dir=shared_cache(cfg))
        )
        return self.env

    def prompt_set(self, source: DataSource, *, config_key: str) -> PromptSet:
        """``source``'s rows and their prompt ids: each row's opening in the environment.
        The training rows of an asynchronous run are checked to fit its JSON checkpoints
        as they load (the stream's buffered groups keep their rows)."""
        streamed = config_key == "data.train"
        prompts = load_prompt_set(
            source,
            tokenizer=self.tokenizer,
            data=self.cfg.data,
            config_key=config_key,
            env=self._env(),
            max_staleness=self.cfg.rollout.max_staleness if streamed else 0,
            answer_fields=answer_fields(self.cfg),
            check_rows=partial(check_loaded_rows, self.cfg, config_key=config_key),
        )
        if streamed and (few := too_few_rows(len(prompts), cfg=self.cfg)):
            raise DataError(few[0])
        return prompts

    def start(
        self, *, places: list[dict[str, Any]] | None = None, teacher: bool = False
    ) -> RolloutParts:
        """The engine (replicas on the training ranks' nodes at ``places``, or one here),
        the scorer, with ``teacher`` (training) and a teacher term (``algo.teacher_coef``
        > 0) the teacher's engines (``engines/teacher.make_teacher``), in that order, and
        the function that runs and scores episodes (which asks the teacher as groups
        finish, with ``rollout.max_staleness >= 1``)."""
        cfg = self.cfg
        log_containment(cfg)
        engine = self.closing(
            start_engine(
                cfg,
                tokenizer=self.tokenizer,
                device=self.device,
                cache_dir=self.cache_dir,
                places=places,
            )
        )
        # the reward functions in reward.sandbox.workers processes, for the whole run
        data = cfg.data
        scorer = RewardScorer(
            cfg.reward,
            answer_key=data.answer_key,
            prompt_key=data.prompt_key,
            decode=partial(self.tokenizer.decode, skip_special_tokens=False),  # as rendered
        )
        score = self.closing(TimedScore(scorer))
        timed_teacher = None
        if teacher and cfg.algo.teacher_coef > 0:
            from grouprl.engines.teacher import make_teacher

            assert cfg.teacher is not None  # config/algo_checks: a teacher term needs one
            logger.info(
                "starting the teacher %s (%s engine), frozen: on-policy distillation, "
                "algo.teacher_coef=%g (docs/distillation.md)",
                cfg.teacher.path,
                cfg.teacher.engine or cfg.rollout.engine,
                cfg.algo.teacher_coef,
            )
            engines = self.closing(
                make_teacher(cfg, device=self.device, places=places, cache_dir=self.cache_dir)
            )
            timed_teacher = TimedTeacher(
                engines, on_error=cfg.reward.on_error, top_k=cfg.algo.teacher_top_k
            )
        rollout = self._closing_if_closeable(
            make_rollout(
                cfg,
                engine=engine,
                tokenizer=self.tokenizer,
                score=score,
                env=self._env(),
                teacher=timed_teacher,
            )
        )
        # every episode's outcome passes here: the environment's or agent's failure brake
        rollout = with_episode_brake(cfg, rollout, env=self._env())
        return RolloutParts(engine=engine, score=score, rollout=rollout, teacher=timed_teacher)

    def _env(self) -> Environment:
        assert self.env is not None, "RolloutBuilder.environment() comes first"
        return self.env

    def _closing_if_closeable(self, part: T) -> T:
        """``part``, closed with the block if its type has ``close()``: an environment or
        a rollout function may hold worker processes, and need not."""
        if isinstance(part, Closeable):
            self._stack.callback(part.close)
        return part


def log_containment(cfg: RunConfig) -> None:
    """One line at the run's start: what the reward (and environment) workers are held
    to; a warning where ``network: false`` cannot be kept on this machine."""
    from grouprl.envs.registry import BUILT_IN
    from grouprl.sandbox.isolation import containment
    from grouprl.sandbox.program import program_sandbox_line

    reward, env = cfg.reward, cfg.env
    parts = [("reward", reward.network, reward.sandbox)]
    if env.sandbox.workers > 0 and (env.agent is not None or env.name not in BUILT_IN):
        parts.append(("env", env.network, env.sandbox))
    lines, refused = [], []
    for who, network, box in parts:
        text, off_refused = containment(
            network=network, memory_mb=box.memory_mb, memory_limit=box.memory_limit
        )
        lines.append(f"{who} workers: {text}, {box.timeout_s:g} s per call")
        if off_refused:
            refused.append(f"{who}.network=false")
    logger.info("contained (docs/sandbox.md): " + "; ".join(lines))
    if (programs := program_sandbox_line(cfg.reward.functions)) is not None:
        line, enclosed = programs  # without namespaces: on the host's files and network
        logger.log(logging.INFO if enclosed else logging.WARNING, line)
    if refused:
        logger.warning(
            f"{' and '.join(refused)} cannot be kept on this machine: the workers keep the "
            "network, or the host's Unix sockets (see above). Fix: run where `unshare -rn "
            "true` succeeds as your user, or set the key to true to accept it "
            "(*.sandbox.require_isolation=true refuses such a run)"
        )
