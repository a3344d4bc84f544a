"""Score completions with the configured reward functions, without letting one hang the run.

::

    completions[i], rows[i] ──► for each (name, fn, weight):
                                  runner.call(fn, text, reference=row[answer_key], row=row)
                                    │ number ──────────────────────────► parts[name][i]
                                    │ raises / NaN / not a number / past timeout_s
                                    ▼
                      on_error="zero": parts[name][i] = 0.0, RewardFailure recorded
                      on_error="abort": RewardError (function, sample, row, message)
                                    ▼
                      total[i] = sum over functions of weight * parts[name][i]

Calls run one at a time on a daemon worker thread (reward functions are
plain Python and hold the GIL, so threads would not run them in parallel).
A call past its deadline is abandoned along with its worker and a fresh worker
takes over: a hung function costs ``timeout_s`` once, never blocks the run,
and never blocks interpreter exit. (``ThreadPoolExecutor`` is not used because
its workers are joined at exit and a stuck worker starves the pool.)
"""

from __future__ import annotations

import contextlib
import logging
import math
import numbers
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from grouprl.data.sources import MISSING, get_field
from grouprl.rewards.registry import RewardError

logger = logging.getLogger(__name__)


@dataclass
class RewardFailure:
    """One reward call that raised, returned a non-number or NaN, or timed out."""

    function: str
    sample_index: int
    row_index: int | None
    """The row's ``_index`` (its position in the data source)."""
    error_type: str
    message: str

    def describe(self) -> str:
        return (
            f"reward function {self.function!r} failed on sample {self.sample_index} "
            f"(row {self.row_index}): {self.error_type}: {self.message}"
        )


@dataclass
class RewardScores:
    total: list[float]
    """Weighted sum of the functions' scores, one per completion."""
    parts: dict[str, list[float]]
    """Each function's unweighted score per completion (0.0 where it failed)."""
    errors: list[RewardFailure] = field(default_factory=list)

    @staticmethod
    def concat(batches: list[RewardScores]) -> RewardScores:
        """The scores of several scoring calls, in order (errors keep their own indices)."""
        parts: dict[str, list[float]] = {}
        for scores in batches:
            for name, values in scores.parts.items():
                parts.setdefault(name, []).extend(values)
        return RewardScores(
            total=[x for scores in batches for x in scores.total],
            parts=parts,
            errors=[e for scores in batches for e in scores.errors],
        )


class _Job:
    def __init__(self, fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> None:
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.value = self.fn(*self.args, **self.kwargs)
        except BaseException as err:  # SystemExit too: it would end the worker silently
            self.error = err
        finally:
            self.done.set()


def _serve(inbox: queue.SimpleQueue) -> None:
    while (job := inbox.get()) is not None:  # None: the runner closed or abandoned this worker
        job.run()


class RewardRunner:
    """Runs calls on a daemon worker with a per-call deadline; reuse one across steps.

    ``close()`` ends the worker; an abandoned (timed-out) worker ends by itself
    once its call returns, so no idle threads pile up.
    """

    def __init__(self) -> None:
        self._inbox: queue.SimpleQueue | None = None

    def close(self) -> None:
        if self._inbox is not None:
            self._inbox.put(None)
            self._inbox = None

    def call(self, fn: Callable[..., Any], /, *args: Any, timeout_s: float, **kwargs: Any) -> _Job:
        """Run ``fn``; the returned job has ``value`` or ``error``, or ``done`` unset on timeout."""
        if self._inbox is None:
            self._inbox = queue.SimpleQueue()
            threading.Thread(
                target=_serve, args=(self._inbox,), daemon=True, name="grouprl-reward"
            ).start()
        job = _Job(fn, args, kwargs)
        self._inbox.put(job)
        if not job.done.wait(timeout_s):
            self.close()  # the worker is stuck in fn: it exits when fn returns; start another
        return job


def score_completions(
    *,
    functions: list[tuple[str, Callable[..., Any], float]],
    completions: list[str],
    rows: list[dict[str, Any]],
    answer_key: str,
    on_error: Literal["zero", "abort"],
    timeout_s: float,
    runner: RewardRunner | None = None,
) -> RewardScores:
    """Scores of ``completions[i]`` against ``rows[i]`` (rows repeat for a prompt's samples).

    ``functions`` holds ``(name, fn, weight)`` as ``registry.resolve_rewards`` returns.
    Pass a long-lived ``runner`` to reuse one worker thread across steps; without
    one, a worker is started and closed within this call.
    """
    if len(completions) != len(rows):
        raise ValueError(f"{len(completions)} completions but {len(rows)} rows; pair them 1:1")
    parts = {name: [0.0] * len(completions) for name, _, _ in functions}
    errors: list[RewardFailure] = []
    with _runner_for_call(runner) as worker:
        for i, (text, row) in enumerate(zip(completions, rows, strict=True)):
            reference = get_field(row, answer_key)
            reference = None if reference is MISSING else reference
            for name, fn, _ in functions:
                job = worker.call(fn, text, timeout_s=timeout_s, reference=reference, row=row)
                score, failure = _outcome(
                    job, name=name, sample_index=i, row=row, timeout_s=timeout_s
                )
                if failure is None:
                    parts[name][i] = score
                    continue
                if on_error == "abort":
                    raise RewardError(
                        f"{failure.describe()}. Fix the function, or set reward.on_error=zero "
                        "to score such samples 0 and keep training"
                    ) from job.error
                errors.append(failure)
    if errors:
        logger.warning(
            "%d reward calls failed and scored 0; first: %s", len(errors), errors[0].describe()
        )
    total = [
        sum(weight * parts[name][i] for name, _, weight in functions)
        for i in range(len(completions))
    ]
    return RewardScores(total=total, parts=parts, errors=errors)


@contextlib.contextmanager
def _runner_for_call(runner: RewardRunner | None):
    """The caller's long-lived runner, or one that lives for this call only."""
    if runner is not None:
        yield runner
        return
    own = RewardRunner()
    try:
        yield own
    finally:
        own.close()


def metrics(scores: RewardScores) -> dict[str, float]:
    """``reward/errors`` (failed calls) and ``reward/<name>`` (mean score) per function."""
    out = {"reward/errors": float(len(scores.errors))}
    for name, values in scores.parts.items():
        if values:
            out[f"reward/{name}"] = sum(values) / len(values)
    return out


def _outcome(
    job: _Job, *, name: str, sample_index: int, row: dict[str, Any], timeout_s: float
) -> tuple[float, RewardFailure | None]:
    def failure(error_type: str, message: str) -> tuple[float, RewardFailure]:
        return 0.0, RewardFailure(name, sample_index, row.get("_index"), error_type, message)

    if not job.done.is_set():
        return failure("TimeoutError", f"timeout after {timeout_s:g}s")
    if job.error is not None:
        return failure(type(job.error).__name__, str(job.error))
    value = job.value
    if not isinstance(value, numbers.Real) and hasattr(value, "item"):
        with contextlib.suppress(Exception):  # numpy / 0-d tensor scalars
            value = value.item()
    if not isinstance(value, numbers.Real):
        return failure("TypeError", f"returned {type(value).__name__} {value!r:.80}, not a number")
    score = float(value)
    if not math.isfinite(score):
        return failure("ValueError", f"returned {score}, not a finite number")
    return score, None
