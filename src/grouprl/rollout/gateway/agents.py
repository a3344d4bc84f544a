"""Rollouts by your own agent (``env.agent``): each episode is one call of the agent's
``solve(base_url, task, **kwargs)`` in a worker process, against the gateway in front of
the rollout engine (docs/gateway.md).

::

    rows ─► rollout.n episodes per row ─► gateway.open ─► pool.submit(run_agent, deadline,
        │                                                   retry_lost=True)
        agent ⇄ HTTP ⇄ gateway ⇄ engine (one engine call per tick for all live episodes)
        agent returns a reward | None | fails (raises, crashes, past env.agent.timeout_s)
        │ its worker died under ANOTHER agent (crash, memory): the pool runs it again,
        │ alone on a fresh worker, and the gateway starts its episode over (Gateway.start)
    ─► one Trajectory per episode (gateway_record: token-exact, the last segment)
    ─► the agent's reward (returned, else reported with POST /reward) is the episode's;
       reward functions score the last assistant message of the episodes without one
       (and not failed): a function's score is never computed where it would go unused
    ─► a failed agent fails its sample (agent_error, rollout/reward.fail): dropped, trained
       as 0 or stopping the run, as env.on_error says; one warning per step

Episodes stay prompt-major (sample g of row p at ``p * n + g``), as the group estimators
need. The pool (``env.sandbox.workers`` processes, ``env.agent.concurrency`` agents at once
in each, ``env.network`` and ``env.sandbox.memory_limit`` as configured) lives as long as
this object; ``env.sandbox.workers=0`` runs agents on threads here, uncontained (for
debugging: a crash ends the run, a hang is only refused by the gateway).
"""

from __future__ import annotations

import logging
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from grouprl.config.containment import FAILED_SAMPLES, OnError
from grouprl.config.schema import RunConfig
from grouprl.engines.base import RolloutEngine, SamplingSettings
from grouprl.rewards.scoring import RewardScores
from grouprl.rollout.episode_scores import ScoreFn, score_trajectories
from grouprl.rollout.gateway.record import EpisodeRecord
from grouprl.rollout.gateway.server import Gateway
from grouprl.rollout.gateway.worker import AGENTS, run_agent
from grouprl.rollout.reward import fail, record_parts
from grouprl.sandbox import CallFailed, WorkerPool
from grouprl.types import Trajectory

logger = logging.getLogger(__name__)

_FAILURE_TYPES = {"timeout": "TimeoutError", "crash": "WorkerCrash", "memory": "MemoryError"}
LISTED_FAILURES = 3
"""Failed agents a step's warning names; the rest are counted by error type."""


@dataclass(frozen=True)
class AgentFailure:
    """One episode whose agent raised, returned a non-number, timed out, crashed its
    worker or ran out of memory."""

    sample_index: int
    row_index: int | None
    error_type: str
    message: str

    def describe(self) -> str:
        return (
            f"sample {self.sample_index} (row {self.row_index}): {self.error_type}: {self.message}"
        )


@dataclass
class AgentOutcome:
    reward: float | None = None
    failure: AgentFailure | None = None


class AgentRollout:
    """A ``RolloutFn`` (``rollout/setup.py``) that runs ``env.agent`` per episode."""

    def __init__(self, cfg: RunConfig, *, engine: RolloutEngine, tokenizer, score: ScoreFn) -> None:
        assert cfg.env.agent is not None
        self.cfg, self.engine, self.tokenizer, self.score = cfg, engine, tokenizer, score
        self.spec = AGENTS.ref(cfg.env.agent.name)  # a file path made absolute
        self.timeout_s = cfg.env.agent.timeout_s
        self._pool: WorkerPool | ThreadPoolExecutor | None = None

    def __call__(
        self, prompt_set, settings: SamplingSettings
    ) -> tuple[list[Trajectory], RewardScores]:
        n = settings.group_size
        gateway = Gateway(
            engine=self.engine,
            tokenizer=self.tokenizer,
            settings=settings,
            max_model_len=self.cfg.rollout.max_model_len,
            max_turns=self.cfg.env.max_turns,
        )
        with gateway.serving():
            keys, outcomes = self._run_agents(gateway, prompt_set.rows, n)
        if gateway.engine_error is not None:
            raise gateway.engine_error
        records = [gateway.episodes[key] for key in keys]
        trajectories = [
            r.trajectory(fallback_prompt=prompt_set.prompts[i // n]) for i, r in enumerate(records)
        ]
        scores = self._score(trajectories, records, outcomes, group_size=n)
        _apply_outcomes(trajectories, records, outcomes, scores, on_error=self.cfg.env.on_error)
        stats = gateway.stats
        logger.debug(
            "gateway: %d calls in %d engine calls, %d refused, %d agents run again",
            stats.batched,
            stats.engine_calls,
            stats.refused,
            sum(r.reruns for r in records),
        )
        return trajectories, scores

    def _score(
        self,
        trajectories: list[Trajectory],
        records: list[EpisodeRecord],
        outcomes: list[AgentOutcome],
        *,
        group_size: int,
    ) -> RewardScores:
        """The reward functions score the episodes whose reward they decide: those whose
        agent neither failed nor gave its own reward (returned or reported, which replaces
        theirs: docs/gateway.md). The others are not scored at all: a score there would go
        unused, and a failure of it would fail a sample that does not need it. All scored:
        one call in groups of ``group_size``; some: the scored ones, grouped by their row
        (``_index``). ``total`` has an entry per episode (0 where not scored, until
        ``_apply_outcomes``); ``parts``, ``extras`` and ``errors`` are the scored ones'."""
        scored = [
            i
            for i, (record, outcome) in enumerate(zip(records, outcomes, strict=True))
            if outcome.failure is None and outcome.reward is None and record.reported_reward is None
        ]
        if not scored:
            return RewardScores(total=[0.0] * len(trajectories), parts={})
        every = len(scored) == len(trajectories)
        scores = score_trajectories(
            [trajectories[i] for i in scored],
            score=self.score,
            correct_function=self.cfg.reward.correct_function,
            group_size=group_size if every else None,
            on_error=self.cfg.reward.on_error,
        )
        total = [0.0] * len(trajectories)
        for i, value in zip(scored, scores.total, strict=True):
            total[i] = value
        scores.total = total
        return scores

    def _run_agents(
        self, gateway: Gateway, rows: list[dict[str, Any]], group_size: int
    ) -> tuple[list[str], list[AgentOutcome]]:
        """Starts ``group_size`` episodes per row (prompt-major) and waits for each agent."""
        keys, futures = [], []
        for p, row in enumerate(rows):
            for g in range(group_size):
                key = gateway.open(index=p * group_size + g, row=row)
                future = self._submit(gateway.base_url(key), dict(row), key)
                future.add_done_callback(lambda _, key=key: gateway.finish(key))
                keys.append(key)
                futures.append(future)
        outcomes = [
            self._outcome(f, i, key, gateway)
            for i, (f, key) in enumerate(zip(futures, keys, strict=True))
        ]
        return keys, outcomes

    def _submit(self, base_url: str, task: dict[str, Any], key: str) -> Future:
        kwargs = {"model": "grouprl-policy", "api_key": key}
        network = self.cfg.env.network  # what a failed start's message may blame
        pool = self._started_pool()
        args = (self.spec, base_url, task, kwargs)
        if isinstance(pool, ThreadPoolExecutor):
            return pool.submit(run_agent, *args, network=network)
        # an agent whose worker died under another agent runs again, alone (Gateway.start
        # starts its episode over) rather than failing with it
        return pool.submit(
            run_agent, *args, network=network, deadline_s=self.timeout_s, retry_lost=True
        )

    def _started_pool(self) -> WorkerPool | ThreadPoolExecutor:
        if self._pool is None:
            env = self.cfg.env
            assert env.agent is not None, "an AgentRollout is made only for env.agent"
            if env.sandbox.workers == 0:
                self._pool = ThreadPoolExecutor(max_workers=env.agent.concurrency)
            else:
                self._pool = WorkerPool(
                    env.sandbox,
                    name="agent",
                    network=env.network,
                    concurrency=env.agent.concurrency,
                )
        return self._pool

    def _outcome(self, future: Future, index: int, key: str, gateway: Gateway) -> AgentOutcome:
        row = gateway.episodes[key].row
        try:
            # the pool enforces the deadline from the call's start; threads only here
            wait = None if isinstance(self._pool, WorkerPool) else self.timeout_s
            return AgentOutcome(reward=future.result(timeout=wait))
        except FutureTimeout:
            gateway.finish(key)
            error_type, message = "TimeoutError", f"past env.agent.timeout_s={self.timeout_s:g}"
        except CallFailed as err:
            error_type = _FAILURE_TYPES.get(err.kind, err.error_type or "Exception")
            message = err.message.removeprefix(f"{err.error_type}: ")
            if err.kind == "timeout":
                message = f"past env.agent.timeout_s={self.timeout_s:g}"
            elif err.kind == "memory":
                message += f" (env.sandbox.memory_mb={self.cfg.env.sandbox.memory_mb})"
            if not err.own:
                message += " (its worker died while it ran other agents too)"
        except Exception as err:  # workers=0: the agent's own exception
            if isinstance(self._pool, WorkerPool):
                raise  # not one call's failure: the pool cannot run any (main_guard)
            error_type, message = type(err).__name__, str(err)
        return AgentOutcome(failure=AgentFailure(index, row.get("_index"), error_type, message))

    def close(self) -> None:
        if isinstance(self._pool, WorkerPool):
            self._pool.close()
        elif self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        self._pool = None


def _apply_outcomes(
    trajectories: list[Trajectory],
    records: list[EpisodeRecord],
    outcomes: list[AgentOutcome],
    scores: RewardScores,
    *,
    on_error: OnError,
) -> None:
    """The agent's reward (returned, else reported) is the ``agent`` part of the sample's
    reward, which replaces the reward functions' total; a failed agent fails its sample
    (``agent_error``, ``rollout/reward.fail`` with ``env.on_error``): dropped, trained as 0
    or raised, and counted and logged once for the step."""
    agent_rewards = []
    for i, (traj, record, outcome) in enumerate(zip(trajectories, records, outcomes, strict=True)):
        reward = outcome.reward if outcome.reward is not None else record.reported_reward
        failure = outcome.failure
        traj.turns[0].info["gateway"] = record.summary(
            failure=None if failure is None else failure.error_type
        )
        if failure is not None:
            traj.stop_reason = "env_error"
            message = f"{failure.error_type}: {failure.message}"
            fail(traj, reason="agent_error", on_error=on_error, message=message, sample=i)
        elif reward is not None:
            record_parts(traj, agent=reward)
            traj.correct = reward >= 1.0
        else:
            continue  # the reward functions' total stands
        scores.total[i] = traj.reward
        agent_rewards.append(traj.reward)
    if agent_rewards:
        scores.parts["agent"] = agent_rewards
    _log_failures([o.failure for o in outcomes if o.failure is not None], len(outcomes), on_error)


def _log_failures(failures: list[AgentFailure], episodes: int, on_error: OnError) -> None:
    """One warning for the step's failed agents: counts by error type, the first few."""
    if not failures:
        return
    counts = Counter(f.error_type for f in failures)
    fate = FAILED_SAMPLES[on_error]
    listed = "; ".join(f.describe() for f in failures[:LISTED_FAILURES])
    more = (
        f"; and {len(failures) - LISTED_FAILURES} more" if len(failures) > LISTED_FAILURES else ""
    )
    logger.warning(
        "%d of %d agent episodes failed (%s), %s (env.on_error=%s): %s%s",
        len(failures),
        episodes,
        ", ".join(f"{count} {kind}" for kind, count in counts.most_common()),
        fate,
        on_error,
        listed,
        more,
    )
