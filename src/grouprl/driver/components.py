"""What a run is made of (``Components``, built once by ``driver.run.build``) and what
changes as it goes (``RunState``, which a checkpoint saves and restores whole)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from torch import Tensor

from grouprl.algo.entropy import EntropyController, ExplorationWatch
from grouprl.algo.kl import KLController
from grouprl.ckpt.best import Best
from grouprl.config.schema import RunConfig
from grouprl.data.sampler import PromptSampler
from grouprl.driver.source import RolloutSource
from grouprl.engines.replicas import ReplicaSet
from grouprl.envs.base import Environment
from grouprl.metrics.telemetry import Hardware
from grouprl.rollout.episode_scores import TimedScore
from grouprl.rollout.setup import PromptSet, RolloutFn
from grouprl.rollout.teacher_scores import TimedTeacher
from grouprl.types import TrainingBatch
from grouprl.workers.critic import CriticWorker
from grouprl.workers.group import Role, WorkerGroup
from grouprl.workers.policy import PolicyWorker


@dataclass
class RunState:
    """What changes as the run goes, saved and restored whole by a checkpoint: the step,
    the weight version the engine serves, the sampler's position, the KL and entropy
    coefficients, the entropy-reward points (``algo/entropy.ExplorationWatch``), the best
    validation so far (``checkpoint.keep_best``), the steps in a row that trained no
    sample (``driver/idle.py``)."""

    sampler: PromptSampler
    kl: KLController
    step: int = 0
    weight_version: int = 0
    best: Best | None = None
    idle_steps: int = 0
    entropy: EntropyController = field(default_factory=lambda: EntropyController(0.0))
    exploration: ExplorationWatch = field(default_factory=ExplorationWatch)

    def state_dict(self, *, sampler: dict[str, Any] | None = None) -> dict[str, Any]:
        """``sampler``: the sampler's position to record instead of its current one (before
        a batch drawn ahead)."""
        return {
            "step": self.step,
            "weight_version": self.weight_version,
            "sampler": self.sampler.state_dict() if sampler is None else sampler,
            "algo": self.kl.state_dict() | self.entropy.state_dict(),
            "exploration": self.exploration.state_dict(),
            "best": None if self.best is None else asdict(self.best),
            "idle_steps": self.idle_steps,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step, self.weight_version = state["step"], state["weight_version"]
        self.sampler.load_state_dict(state["sampler"])
        self.kl.load_state_dict(state["algo"])
        self.entropy.load_state_dict(state["algo"])
        if state.get("exploration") is not None:  # none in older checkpoints
            self.exploration.load_state_dict(state["exploration"])
        self.best = Best.from_dict(state.get("best"))
        self.idle_steps = int(state.get("idle_steps", 0))  # none in older checkpoints


@dataclass(frozen=True)
class Components:
    """Everything the loop needs, built once by ``driver.run``; ``state`` is what changes."""

    cfg: RunConfig
    tokenizer: Any
    group: WorkerGroup  # the training ranks (this process, or Ray actors)
    policy: Role[PolicyWorker]  # weights, optimizer, LR schedule
    reference_logprobs: Callable[[TrainingBatch], Tensor] | None  # the KL reference's, beta > 0
    engine: ReplicaSet  # the rollout engines, one or many, in the driver or Ray actors
    train_set: PromptSet
    eval_set: PromptSet | None
    score: TimedScore  # the reward functions, timed
    rollout: RolloutFn  # episodes for a prompt set, scored (single- or multi-turn)
    mini_batch_size: int
    total_steps: int
    state: RunState
    checkpoint_files: dict[str, bytes]  # the model's config and tokenizer files, the config
    hardware: Hardware  # model shape and device peak, for MFU
    rollouts: RolloutSource  # the batches: inline, or the stream (rollout.max_staleness >= 1)
    critic: Role[CriticWorker] | None = None  # with a critic: section
    env: Environment | None = None  # its worker processes close with the run
    teacher: TimedTeacher | None = None  # the distillation teacher (algo.teacher_coef > 0)

    def checkpoint_state(self) -> dict[str, Any]:
        """``state`` as a checkpoint records it; with the stream, its buffer and rounds in
        flight too (``stream``), and the sampler as the stream saw it under its lock."""
        stream = self.rollouts.state_dict()
        sampler = None if stream is None else stream["sampler"]
        return self.state.state_dict(sampler=sampler) | {"stream": stream}
