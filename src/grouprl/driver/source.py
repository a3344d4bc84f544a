"""Where a step's batch comes from: rounds of B prompts, generated and scored, each group
kept or evicted (dynamic sampling), until B groups are kept.

    one_step ── take(version) ──► RolloutSource ── rounds: generate(rows, index, attempt)
               advanced, paused,        │ kept ─► buffer (FIFO); evicted ─► filler
               stop, state_dict         ▼ B kept, or max_rounds rounds: filled ─► Taken

``RolloutSource`` generates a step's rounds on the caller's thread (the synchronous loop,
rollout.max_staleness=0); ``Stream`` (driver/stream.py) on a producer thread ahead of
the trainer. Both keep and fill by ``_keep``: after ``max_rounds`` rounds without
completing the batch, it is completed with evicted groups (zero advantage) and a
warning, so a task without any signal never loops forever.

Seeds (``grouprl.seeds.step_seed``): round (index i, attempt a) samples as round a of
step i + 1. Inline, step s's rounds are (s - 1, 0), (s - 1, 1), ...: a resume draws the
same with only the sampler saved. The stream counts its rounds globally (attempt 0).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from grouprl.data.sampler import PromptSampler
from grouprl.rewards.scoring import RewardScores
from grouprl.types import Trajectory

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Round:
    """One admitted round: its index and attempt (its seed's), its dataset row positions in
    prompt order, and the engine's weight version when it was admitted."""

    index: int
    rows: list[int]
    version: int
    attempt: int = 0


@dataclass
class RoundStats:
    """What one generation round produced, for the step's metrics: every sample generated
    (kept or not), the scores, the seconds generating and scoring, and the replicas'
    counters (``ReplicaSet.drain_metrics``)."""

    generated: list[Trajectory]
    scores: list[RewardScores]
    generate_s: float
    reward_s: float
    replicas: dict[str, float]
    teacher_s: float = 0.0  # asking the distillation teacher (not in generate_s)
    reward_hidden_s: float = 0.0  # of reward_s, scoring while the round still generated
    teacher_hidden_s: float = 0.0  # of teacher_s, asked while the round still generated


@dataclass
class Generated:
    """What the generate function returns for a round: ``rollout.n`` trajectories per
    prompt in prompt order, which groups to keep (dynamic sampling's signal; all True
    without it), and ``info``, what it produced for the step's metrics."""

    groups: list[list[Trajectory]]
    keep: list[bool]
    info: RoundStats | None = None


@dataclass
class Group:
    """A finished group, its prompt's row position (in the prompt set the sampler
    walks) and the engine version that admitted it."""

    trajectories: list[Trajectory]
    row: int
    version: int


@dataclass
class Taken:
    """One training batch: ``batch_size`` groups' trajectories (FIFO order), the ``info``
    of every round finished since the last take, the groups dynamic sampling filled it
    with, and the stream's metrics (none inline)."""

    trajectories: list[Trajectory]
    rounds: list[RoundStats]
    metrics: dict[str, float] = field(default_factory=dict)
    filled: int = 0


def oldest_version(t: Trajectory) -> int:
    """The oldest weight version that produced any of the trajectory's tokens (per-token
    ``Completion.versions`` where recorded, else the trajectory's ``weight_version``)."""
    versions = [v for turn in t.turns for v in turn.completion.versions]
    return min(versions, default=t.weight_version)


def group_lag(trajectories: list[Trajectory], *, version: int) -> int:
    """How many versions the group's samples that train lag policy ``version`` (0 when
    none trains: a failed sample left out never trains, so its version, which an episode
    that failed early may not even have, bounds nothing)."""
    versions = [oldest_version(t) for t in trajectories if t.trains]
    return version - min(versions) if versions else 0


Generate = Callable[..., Generated]
"""``generate(rows, index, attempt=0)``: one round, generated and scored."""


class RolloutSource:
    """The inline source (rollout.max_staleness=0) and the interface and fill rule that
    ``Stream`` shares (module docstring). ``batch_size``: groups per step; ``max_rounds``:
    rounds a batch may take to fill with kept groups (``algo.max_sampling_rounds`` with
    dynamic sampling, else 1). Its checkpoint state is the sampler's, which ``RunState``
    saves: ``state_dict`` is None."""

    threaded = False
    max_staleness = 0

    def __init__(
        self, generate: Generate, sampler: PromptSampler, *, batch_size: int, max_rounds: int = 1
    ) -> None:
        self.generate, self.sampler = generate, sampler
        self.batch_size, self.max_rounds = batch_size, max_rounds
        self._cond = threading.Condition()
        self._kept = 0  # global positions given to kept groups so far (trained ones too)
        self._buffer: deque[Group] = deque()
        self._spare: list[Group] = []  # evicted groups of the batch being filled (filler)
        self._filling_rounds = 0  # rounds finished since the batch being filled began
        self._finished: list[RoundStats] = []  # rounds' info since the last take
        self._counts = {"dropped_stale": 0, "evicted": 0, "filled": 0}
        self._step_counts = dict.fromkeys(self._counts, 0)

    def take(self, version: int) -> Taken:
        """The batch that trains policy ``version`` (the steps trained so far), generated
        now: rounds of ``batch_size`` prompts until it is complete. Groups kept past it
        are let go (the next step's would lag a version, and the sampler has moved on)."""
        self._kept = version * self.batch_size
        while len(self._buffer) < self.batch_size:
            rows = self.sampler.next_batch(self.batch_size)
            round_ = Round(version, rows, version, attempt=self._filling_rounds)
            self._keep(round_, self.generate(rows, round_.index, round_.attempt))
        groups, rounds, counts = self._pop()
        self._buffer.clear()
        trajectories = [t for g in groups for t in g.trajectories]
        return Taken(trajectories, rounds, filled=counts["filled"])

    def advanced(self, version: int) -> None:
        """The engine serves ``version`` now (after a push)."""

    @contextmanager
    def paused(self) -> Iterator[None]:
        """No round is in flight inside the block (validation uses the engine)."""
        yield

    def stop(self) -> None:
        """Admits nothing more (the run ends)."""

    def close(self) -> None:
        """``stop``, then waits for a round in flight."""

    def state_dict(self) -> dict[str, Any] | None:
        """The source's checkpoint state beyond ``RunState`` (None: nothing)."""
        return None

    # ── the fill rule, shared with the stream (its callers hold the lock) ───────────

    def _keep(self, round_: Round, generated: Generated) -> None:
        """A round's groups into the buffer (kept) or the spare (evicted); a batch that
        took ``max_rounds`` rounds is completed with evicted groups."""
        crossed = False
        parts = zip(generated.groups, round_.rows, generated.keep, strict=True)
        for trajectories, row, keep in parts:
            group = Group(trajectories, row, round_.version)
            if keep:
                self._buffer.append(group)
                self._kept += 1
                crossed |= self._kept % self.batch_size == 0
            else:
                self._count("evicted")
                if not crossed:  # filler for the batch being filled, not the next
                    self._spare.append(group)
        self._filling_rounds += 1
        if crossed:
            self._spare, self._filling_rounds = [], 0
        elif self._filling_rounds >= self.max_rounds:
            self._fill()
        if generated.info is not None:
            self._finished.append(generated.info)

    def _fill(self) -> None:
        """Completes the batch being filled with evicted groups (they add no gradient)."""
        missing = self.batch_size - self._kept % self.batch_size  # the batch is not full
        logger.warning(
            "dynamic sampling found %d of %d groups with differing rewards in "
            "algo.max_sampling_rounds=%d rounds; filled the batch with %d zero-advantage "
            "groups. If this repeats, raise algo.max_sampling_rounds or check that the "
            "rewards can differ (a task too easy or too hard for the model).",
            self.batch_size - missing,
            self.batch_size,
            self.max_rounds,
            missing,
        )
        assert len(self._spare) >= missing, "each round of B prompts evicts what it does not keep"
        self._buffer.extend(self._spare[:missing])
        self._kept += missing
        self._count("filled", missing)
        self._spare, self._filling_rounds = [], 0

    def _pop(self) -> tuple[list[Group], list[RoundStats], dict[str, int]]:
        """The next batch's groups, the rounds finished since the last take, and the
        counts since then."""
        groups = [self._buffer.popleft() for _ in range(self.batch_size)]
        rounds, self._finished = self._finished, []
        counts, self._step_counts = self._step_counts, dict.fromkeys(self._counts, 0)
        return groups, rounds, counts

    def _count(self, name: str, n: int = 1) -> None:
        self._counts[name] += n
        self._step_counts[name] += n
