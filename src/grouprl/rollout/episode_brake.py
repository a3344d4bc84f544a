"""The failure brake over episodes: a run whose environment or agent fails every episode
stops, naming it, its last error and the fix (``env.failure_brake``).

::

    rollout(prompt_set) ─► scored trajectories, every episode's outcome (training's,
        │                  validation's; the synchronous loop's, the stream's rounds)
        ▼
    each episode in sample order: failed (stop reason env_error: its environment's step
    or its agent failed, however) or not
        ▼
    FailureBrake (rewards/failures.py), one window for the run: the last env.failure_brake
    episodes all failed ──► CannotTrain("env_failures" | "agent_failures")

Built around the rollout function (``rollout/builder.py``), so it sees every episode in
one place: on the stream's producer thread the error ends the round, and the stream
raises it to the trainer at its next take (``driver/stream.py``). Single-turn
prompting has no environment that can fail, and is not counted.
"""

from __future__ import annotations

from dataclasses import dataclass

from grouprl.config.schema import RunConfig
from grouprl.engines.base import SamplingSettings
from grouprl.envs.base import Environment
from grouprl.envs.single_turn import SingleTurnEnv
from grouprl.rewards.failures import FailureBrake
from grouprl.rewards.scoring import RewardScores
from grouprl.rollout.reward import describe_sample
from grouprl.rollout.setup import PromptSet, RolloutFn
from grouprl.types import Trajectory

EPISODE_FAILURES = ("env_error", "agent_error")


@dataclass(frozen=True)
class EpisodeFailure:
    """One failed episode: where it was, and its error."""

    where: str
    """``sample 3 (prompt index 12)``."""
    error: str


class BrakedRollout:
    """``rollout`` with a ``FailureBrake`` over its episodes; call it as the rollout."""

    def __init__(self, rollout: RolloutFn, *, limit: int, source: str, agent: bool) -> None:
        self.rollout, self.source, self.agent = rollout, source, agent
        self.brake: FailureBrake[EpisodeFailure] = FailureBrake(
            limit,
            explain=self._explain,
            kind="agent_failures" if agent else "env_failures",
        )

    def __call__(
        self, prompt_set: PromptSet, settings: SamplingSettings
    ) -> tuple[list[Trajectory], RewardScores]:
        trajectories, scores = self.rollout(prompt_set, settings)
        for i, traj in enumerate(trajectories):
            self.brake.record(self.source, episode_failure(traj, sample=i))
        return trajectories, scores

    def _explain(self, source: str, last: EpisodeFailure, count: int) -> str:
        what = f"agent {source!r}" if self.agent else f"environment {source!r}"
        repair = (
            "the agent (or the service it calls)"
            if self.agent
            else "the environment (or the tool or server it calls)"
        )
        return (
            f"{what} failed its last {count} episodes in a row (env.failure_brake="
            f"{self.brake.limit}); the last, {last.where}: {last.error}. Stopped rather "
            f"than train on nothing. Fix: repair {repair}, or raise env.failure_brake "
            "(null: never stop)"
        )


def episode_failure(traj: Trajectory, *, sample: int) -> EpisodeFailure | None:
    """The episode's failure, None when its environment or agent did not fail (a reward
    function's failure is the reward brake's, not this one's)."""
    if traj.stop_reason != "env_error":
        return None
    parts = traj.reward_parts
    error = parts.error if parts.failure in EPISODE_FAILURES else None
    error = error or traj.turns[-1].info.get("env_error") or "failed (no error recorded)"
    return EpisodeFailure(describe_sample(traj, sample), str(error))


def with_episode_brake(cfg: RunConfig, rollout: RolloutFn, *, env: Environment) -> RolloutFn:
    """``rollout`` stopping the run when ``env.failure_brake`` episodes in a row failed;
    ``rollout`` as it is where nothing can fail an episode (single-turn prompting without
    an agent) or the brake is off (null)."""
    agent = cfg.env.agent
    limit = cfg.env.failure_brake
    if limit is None or (agent is None and isinstance(env, SingleTurnEnv)):
        return rollout
    source = agent.name if agent is not None else cfg.env.name
    return BrakedRollout(rollout, limit=limit, source=source, agent=agent is not None)
