"""Failed reward calls: the record of one, the run's failure brake, and the step's warning.

::

    a call's CallFailed (or a TRL None) ──► RewardFailure(function, sample, row, type, kind)
        │                                        │
        ▼                                        ▼
    FailureBrake.record (kept for the run):   log_failures (once per step): one warning
    the first ``reward.failure_brake`` calls  per function, with its count, the kinds and
    of a function all failed the same way     the first failure's sample and row
    ──► RewardError: the run stops

What becomes of a failed sample (left out of training, or trained as 0) is the rollout's
to decide (``rollout/reward.fail``), from ``reward.on_error``.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from typing import Literal

from grouprl.config.schema import FAILED_SAMPLES
from grouprl.rewards.registry import RewardError

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
    kind: Literal["timeout", "crash", "memory", "error"] = "error"
    samples: int = 1
    """Samples the failed call scored (a group reward's group: from ``sample_index`` on)."""
    own: bool = True
    """Surely this call's failure: False when its worker died with other calls in flight
    or the step's deadline (``reward.step_timeout_s``) ended it; the brake skips those."""

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


class FailureBrake:
    """Stops the run when the first ``limit`` calls of a reward function (counted from the
    run's start) all failed with the same error type and kind: a broken grader (a typo, a
    missing package, a judge that is down) would otherwise score a whole run. One call
    that returns, or fails otherwise, releases that function for the rest of the run.
    ``limit=None``: never stops."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self._first: dict[str, RewardFailure] = {}
        self._count: dict[str, int] = {}
        self._released: set[str] = set()

    def record(self, function: str, failure: RewardFailure | None) -> None:
        """Counts one call of ``function`` (``failure`` None: it returned); raises
        ``RewardError`` when the brake trips. Failures not surely the call's own (``own``
        False) are not counted either way."""
        if self.limit is None or function in self._released:
            return
        if failure is not None and not failure.own:
            return
        first = self._first.get(function)
        if failure is None or (first is not None and not _same(first, failure)):
            self._released.add(function)
            return
        first = self._first.setdefault(function, failure)
        self._count[function] = self._count.get(function, 0) + 1
        if self._count[function] >= self.limit:
            raise RewardError(
                f"reward function {function!r} failed on each of its first {self.limit} "
                f"calls with the same error, {first.error_type}: {first.message} (first on "
                f"{first.where()}): stopped rather than train on a broken grader. Fix the "
                "function (call it by hand on a row of your data), or raise "
                "reward.failure_brake (null: never stop)"
            )


def _same(a: RewardFailure, b: RewardFailure) -> bool:
    return (a.error_type, a.kind) == (b.error_type, b.kind)


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
