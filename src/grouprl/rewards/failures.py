"""Failed reward calls: the record of one, the failure brake, the run's stop, and the
step's warning.

::

    a call's CallFailed (or a TRL None) ──► RewardFailure(function, sample, row, type, kind)
        │                                        │
        ▼                                        ▼
    FailureBrake.record (kept for the run):   log_failures (once per step): one warning
    a sliding window per function: its last   per function, with its count, the kinds and
    ``reward.failure_brake`` calls all failed  the first failure's sample and row
    (any error, mixed too), whenever in the run
    ──► CannotTrain("reward_failures"): the run stops, naming the function, its last
        error and the fix (``driver/run.py`` writes why in summary.json)

The brake is generic: ``rollout/episode_brake.py`` keeps one over an environment's or
an agent's episodes (``env.failure_brake``), and ``driver/idle.py`` raises the same
``CannotTrain`` for a streak of steps that train no sample.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from grouprl.config.containment import FAILED_SAMPLES

logger = logging.getLogger(__name__)


@dataclass
class RewardFailure:
    """One reward call that raised, returned a non-number or NaN, timed out, crashed its
    worker or ran out of memory (or one sample a TRL function returned None for)."""

    function: str
    sample_index: int
    row_index: int | None
    """The row's ``_index`` (its position in the data source)."""
    error_type: str
    """The exception's class name; "TimeoutError", "WorkerCrash" or "MemoryError" for a
    call its worker did not survive."""
    message: str
    kind: FailureKind = "error"
    samples: int = 1
    """Samples the failed call scored (a group reward's group: from ``sample_index`` on)."""
    own: bool = True
    """Surely this call's failure: False when its worker died with other calls in flight
    or the step's deadline (``reward.step_timeout_s``) ended it. The brake skips those:
    they neither count nor restart its count (a step whose every call the deadline ends
    trains no sample: the idle-step streak, ``trainer.max_idle_steps``, stops that run)."""
    reported: bool = False
    """The reward reported this sample's failure itself (``SampleFailed``: a judge's
    timeout, HTTP error, unparseable answer), with its kind; counted per kind in the
    step's metrics (``kind_metrics``)."""

    def where(self) -> str:
        """``sample 3 (row 36)``, or ``samples 0-7 (row 2)`` for a group."""
        if self.samples == 1:
            return f"sample {self.sample_index} (row {self.row_index})"
        last = self.sample_index + self.samples - 1
        return f"samples {self.sample_index}-{last} (row {self.row_index})"

    def describe(self) -> str:
        return (
            f"reward function {self.function!r} failed on {self.where()}: "
            f"{self.error_type}: {self.message}"
        )


class CannotTrain(RuntimeError):
    """The run cannot train, so it stops: a function (reward, environment, agent) whose
    recent calls all failed, or a streak of steps that trained no sample. The message
    names the cause, its last error and the fix; ``kind`` says which (``reward_failures``,
    ``env_failures``, ``agent_failures``, ``idle_steps``), as ``summary.json``'s
    ``stopped`` entry records it."""

    user_error = True

    def __init__(self, message: str, kind: str = "reward_failures") -> None:
        super().__init__(message)
        self.kind = kind


FailureKind = Literal[
    "timeout",
    "crash",
    "memory",
    "error",
    "parse",
    "refusal",
    "http",
    "rate_limit",
    "unreachable",
    "bad_response",
]
"""How a call failed: the worker's kinds (``sandbox.CallFailed``: timeout, crash, memory,
error), and the kinds a reward reports per sample (``SampleFailed``, ``judge.py``): an
answer that does not parse, a refusal (no label, an empty answer), an HTTP error, a
rate limit (429), a server that does not answer the connection, a response that is not
the API's shape; a request past its own timeout is ``timeout``."""


@dataclass(frozen=True)
class SampleFailed:
    """What a group reward returns, in place of a score, for one sample it could not
    score while it scored the others: that sample alone fails (a ``RewardFailure`` with
    ``reported``), never its group, and never as a 0. ``error_type``: the cause's name
    (``JudgeTimeout``), ``message``: what happened and the fix."""

    kind: FailureKind
    error_type: str
    message: str


def kind_metrics(errors: list[RewardFailure], names: dict[str, str]) -> dict[str, float]:
    """``<metric>/failed/<kind>``: the samples each function reported failed per kind
    (``SampleFailed``), under its metric name (``names``: ``scores.metric_names``), only
    where nonzero, so a run whose rewards report none logs none of them."""
    out: dict[str, float] = {}
    for e in errors:
        if e.reported and e.function in names:
            key = f"{names[e.function]}/failed/{e.kind}"
            out[key] = out.get(key, 0.0) + e.samples
    return out


F = TypeVar("F")


class FailureBrake(Generic[F]):
    """A sliding window over each source's calls (a reward function's, an environment's
    or an agent's episodes): when the last ``limit`` calls of one source all failed, in
    any way (any error type or kind, mixed ones too), ``record`` raises ``CannotTrain``
    (``kind``) with the message ``explain(source, last_failure, count)`` writes; whenever
    in the run it happens: a success only restarts the count. ``limit=None``: never stops.

    The window lives as long as this object (the run session's): a resumed run starts
    with an empty one, so it stops at most ``limit`` failed calls later."""

    def __init__(
        self,
        limit: int | None,
        *,
        explain: Callable[[str, F, int], str] | None = None,
        kind: str = "reward_failures",
    ) -> None:
        self.limit, self.kind = limit, kind
        self.explain: Callable[[str, Any, int], str] = explain or _reward_stop
        self._failed: dict[str, int] = {}

    def record(self, source: str, failure: F | None) -> None:
        """Counts one call of ``source`` (``failure`` None: it succeeded); raises
        ``CannotTrain`` when its last ``limit`` calls all failed."""
        if failure is None:
            self._failed[source] = 0
            return
        count = self._failed[source] = self._failed.get(source, 0) + 1
        if self.limit is not None and count >= self.limit:
            raise CannotTrain(self.explain(source, failure, count), kind=self.kind)

    def failing(self, source: str) -> int:
        """The calls of ``source`` that failed in a row since its last success."""
        return self._failed.get(source, 0)


def _reward_stop(function: str, last: RewardFailure, count: int) -> str:
    return (
        f"reward function {function!r} failed on its last {count} calls in a row "
        f"(reward.failure_brake={count}); the last on {last.where()}: {last.error_type}: "
        f"{last.message}. Stopped rather than train on nothing. Fix: repair the function, "
        "or the judge or server it calls (call it by hand on a row of your data), or raise "
        "reward.failure_brake (null: never stop)"
    )


def log_failures(errors: list[RewardFailure], *, samples: int, on_error: str) -> None:
    """One warning per function that failed in a step of ``samples`` samples: how many
    samples, the failed calls' kinds, the first failure with its sample and row, and what
    becomes of those samples."""
    by_function: dict[str, list[RewardFailure]] = {}
    for failure in errors:
        by_function.setdefault(failure.function, []).append(failure)
    for function, failures in by_function.items():
        kinds = Counter(f.kind for f in failures)
        first = failures[0]
        logger.warning(
            "reward function %r failed on %d of %d samples this step (%s); first on %s: "
            "%s: %s. Those samples are %s (reward.on_error=%s)",
            function,
            sum(f.samples for f in failures),
            samples,
            ", ".join(f"{count} {kind}" for kind, count in kinds.items()),
            first.where(),
            first.error_type,
            first.message,
            FAILED_SAMPLES[on_error],
            on_error,
        )
