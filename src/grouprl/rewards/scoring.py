"""Score completions with the configured reward functions in contained worker processes.

::

    completions[i], rows[i] ──► for each Reward (name, fn, weight, scope):
        scope "sample": one call per completion  ┐  all submitted at once to the
        scope "group":  one call per prompt group ┘  WorkerPool (reward.sandbox.workers)
                                    │ number(s) ─────────────────────────► parts[name][i]
                                    │ raises / NaN / not a number / past timeout_s (killed) /
                                    │ worker crash (os._exit, segfault) / MemoryError (RLIMIT_AS)
                                    ▼
                      on_error="zero": parts[name][i] = 0.0, RewardFailure recorded and logged
                      on_error="abort": RewardError (function, sample, row, message)
                      either: a function that failed on every sample of the call (two
                      or more) stops the run, RewardError: it would train on zeros
                                    ▼
                      total[i] = sum over functions of weight * parts[name][i]

Each call runs in a worker process (``grouprl.sandbox.WorkerPool``) with ``timeout_s``
as its deadline: a call that hangs (even inside C code) is killed and its worker
replaced, so a bad function costs ``timeout_s`` once per sample and never blocks the
run. Calls for different samples run side by side on the pool's workers.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Literal

from grouprl.config.imports import absolute_import_path, is_import_path
from grouprl.data.sources import MISSING, get_field
from grouprl.rewards.calls import FunctionRef, preload, score_group, score_sample
from grouprl.rewards.registry import Reward, RewardError, unsendable
from grouprl.sandbox import CallFailed, WorkerPool

logger = logging.getLogger(__name__)

LOGGED_FAILURES = 20
"""Failures of one scoring call logged one by one; the rest are summed up in one line."""

ALARM_SHARE = 0.5
"""A function failing on more than this share of a call's samples gets a warning of its
own: the policy would be learning from zeros (a broken grader looks like a bad model)."""


@dataclass
class RewardFailure:
    """One reward call that raised, returned a non-number or NaN, timed out, crashed its
    worker or ran out of memory."""

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

    def describe(self) -> str:
        samples = (
            f"samples {self.sample_index}-{self.sample_index + self.samples - 1}"
            if self.samples > 1
            else f"sample {self.sample_index}"
        )
        return (
            f"reward function {self.function!r} failed on {samples} "
            f"(row {self.row_index}): {self.error_type}: {self.message}"
        )


@dataclass
class RewardScores:
    total: list[float]
    """Weighted sum of the functions' scores, one per completion."""
    parts: dict[str, list[float]]
    """Each function's unweighted score per completion (0.0 where it failed)."""
    errors: list[RewardFailure] = field(default_factory=list)
    worker_restarts: int = 0
    """Reward workers replaced while scoring (killed at a deadline, crashed, out of memory)."""

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
            worker_restarts=sum(scores.worker_restarts for scores in batches),
        )


class RewardScorer:
    """The run's reward functions and the pool of ``workers`` processes they run in (each
    limited to ``memory_mb``); call it as ``scorer(completions=..., rows=..., group_size=n)``
    and ``close()`` it when the run ends. The workers start on the first call and import
    the functions before it."""

    def __init__(
        self,
        *,
        functions: list[Reward],
        answer_key: str,
        on_error: Literal["zero", "abort"],
        timeout_s: float,
        workers: int,
        memory_mb: int | None,
    ) -> None:
        check_sendable(functions)
        self.functions = functions
        self.answer_key, self.timeout_s = answer_key, timeout_s
        self.on_error: Literal["zero", "abort"] = on_error
        refs = [function_ref(f) for f in functions]
        self.pool = WorkerPool(
            size=workers,
            memory_mb=memory_mb,
            name="reward",
            initializer=functools.partial(preload, refs),
        )

    def __call__(
        self,
        *,
        completions: list[str],
        rows: list[dict[str, Any]],
        group_size: int | None = None,
    ) -> RewardScores:
        return score_completions(
            functions=self.functions,
            completions=completions,
            rows=rows,
            answer_key=self.answer_key,
            on_error=self.on_error,
            timeout_s=self.timeout_s,
            pool=self.pool,
            group_size=group_size,
        )

    def close(self) -> None:
        self.pool.close()


def score_completions(
    *,
    functions: list[Reward],
    completions: list[str],
    rows: list[dict[str, Any]],
    answer_key: str,
    on_error: Literal["zero", "abort"],
    timeout_s: float,
    pool: WorkerPool | None = None,
    group_size: int | None = None,
) -> RewardScores:
    """Scores of ``completions[i]`` against ``rows[i]`` (rows repeat for a prompt's samples).

    ``functions`` as ``registry.resolve_rewards`` returns them. ``group_size``: samples per
    prompt (prompt-major order) for group rewards; None: runs of rows with the same
    ``_index``. Pass the run's long-lived ``pool``; without one, a pool of one worker is
    started and closed within this call. Raises ``RewardError`` at the first failure with
    ``on_error="abort"``, and with either when a function failed on every sample.
    """
    if len(completions) != len(rows):
        raise ValueError(f"{len(completions)} completions but {len(rows)} rows; pair them 1:1")
    parts = {f.name: [0.0] * len(completions) for f in functions}
    errors: list[RewardFailure] = []
    references = [_reference(row, answer_key) for row in rows]
    with _pool_for_call(pool, functions) as workers:
        restarts_before = workers.stats()["restarts"]
        calls = list(
            _submit(workers, functions, completions, rows, references, group_size, timeout_s)
        )
        for position, (name, start, size, future) in enumerate(calls):
            try:
                values = future.result()
            except CallFailed as failed:
                failure = _failure(failed, name=name, start=start, size=size, rows=rows)
                if on_error == "abort":
                    for *_, pending in calls[position + 1 :]:
                        pending.cancel()
                    raise RewardError(
                        f"{failure.describe()}. Fix the function, or set reward.on_error=zero "
                        "to score such samples 0 and keep training"
                    ) from failed
                errors.append(failure)
                continue
            parts[name][start : start + size] = values
        restarts = workers.stats()["restarts"] - restarts_before
    failed, first = _failed_samples(errors)
    _stop_if_all_failed(failed, first, samples=len(completions))
    _log(errors)
    _alarm(failed, first, samples=len(completions))
    total = [sum(f.weight * parts[f.name][i] for f in functions) for i in range(len(completions))]
    return RewardScores(total=total, parts=parts, errors=errors, worker_restarts=restarts)


def _submit(
    pool: WorkerPool,
    functions: list[Reward],
    completions: list[str],
    rows: list[dict[str, Any]],
    references: list[Any],
    group_size: int | None,
    timeout_s: float,
) -> Iterator[tuple[str, int, int, Future]]:
    """``(name, first sample, samples, future)`` per call; a future's value is a list of
    ``samples`` scores."""
    for f in functions:
        ref = function_ref(f)
        if f.scope == "sample":
            for i, text in enumerate(completions):
                future = pool.submit(
                    _one_score,
                    ref,
                    text,
                    deadline_s=timeout_s,
                    reference=references[i],
                    row=rows[i],
                )
                yield f.name, i, 1, future
            continue
        for start, stop in _groups(rows, group_size):
            future = pool.submit(
                score_group,
                ref,
                completions[start:stop],
                deadline_s=timeout_s,
                references=references[start:stop],
                rows=rows[start:stop],
            )
            yield f.name, start, stop - start, future


def _one_score(ref: FunctionRef, text: str, *, reference: Any, row: dict) -> list[float]:
    return [score_sample(ref, text, reference=reference, row=row)]


def _groups(rows: list[dict[str, Any]], group_size: int | None) -> list[tuple[int, int]]:
    if group_size is not None:
        if group_size < 1 or len(rows) % group_size:
            raise ValueError(f"{len(rows)} samples do not split into groups of {group_size}")
        return [(s, s + group_size) for s in range(0, len(rows), group_size)]
    bounds = [i for i in range(1, len(rows)) if rows[i].get("_index") != rows[i - 1].get("_index")]
    starts = [0, *bounds]
    return list(zip(starts, [*bounds, len(rows)], strict=True))


def function_ref(f: Reward) -> FunctionRef:
    """What a worker gets for ``f``: an import path (resolved there, once per worker), or
    the function itself (built-in or registered: pickled by reference)."""
    return absolute_import_path(f.name) if is_import_path(f.name) else f.fn


def check_sendable(functions: list[Reward]) -> None:
    """Raise if a registered function cannot be sent to the reward workers (a lambda, a
    nested function): found when the run starts, not as an error on every sample."""
    for i, f in enumerate(functions):
        if (problem := unsendable(f.name, f.fn, index=i)) is not None:
            raise RewardError(problem)


def metrics(scores: RewardScores) -> dict[str, float]:
    """``reward/errors`` (every failed call), of which ``reward/timeouts``,
    ``reward/crashes`` and ``reward/memory_errors``; ``reward/worker_restarts``; and
    ``reward/<name>`` (mean score) per function."""
    kinds = [e.kind for e in scores.errors]
    out = {
        "reward/errors": float(len(kinds)),
        "reward/timeouts": float(kinds.count("timeout")),
        "reward/crashes": float(kinds.count("crash")),
        "reward/memory_errors": float(kinds.count("memory")),
        "reward/worker_restarts": float(scores.worker_restarts),
    }
    for name, values in scores.parts.items():
        if values:
            out[f"reward/{name}"] = sum(values) / len(values)
    return out


@contextlib.contextmanager
def _pool_for_call(pool: WorkerPool | None, functions: list[Reward]):
    """The caller's long-lived pool, or one that lives for this call only."""
    if pool is not None:
        yield pool
        return
    check_sendable(functions)
    refs = [function_ref(f) for f in functions]
    preloaded = functools.partial(preload, refs)
    with WorkerPool(size=1, memory_mb=None, name="reward", initializer=preloaded) as own:
        yield own


def _reference(row: dict[str, Any], answer_key: str) -> Any:
    reference = get_field(row, answer_key)
    return None if reference is MISSING else reference


def _failure(
    failed: CallFailed, *, name: str, start: int, size: int, rows: list[dict[str, Any]]
) -> RewardFailure:
    message = failed.message.removeprefix(f"{failed.error_type}: ")
    return RewardFailure(
        name,
        start,
        rows[start].get("_index"),
        failed.error_type,
        message,
        kind=failed.kind,
        samples=size,
    )


def _log(errors: list[RewardFailure]) -> None:
    for failure in errors[:LOGGED_FAILURES]:
        logger.warning("%s; scored 0", failure.describe())
    if len(errors) > LOGGED_FAILURES:
        logger.warning(
            "%d more reward calls failed and scored 0 (%d in all)",
            len(errors) - LOGGED_FAILURES,
            len(errors),
        )


def _failed_samples(
    errors: list[RewardFailure],
) -> tuple[dict[str, int], dict[str, RewardFailure]]:
    """Per function: the samples its failed calls scored, and its first failure."""
    failed: dict[str, int] = {}
    first: dict[str, RewardFailure] = {}
    for failure in errors:
        failed[failure.function] = failed.get(failure.function, 0) + failure.samples
        first.setdefault(failure.function, failure)
    return failed, first


def _stop_if_all_failed(
    failed: dict[str, int], first: dict[str, RewardFailure], *, samples: int
) -> None:
    """Raise ``RewardError`` for a function that failed on every one of two or more
    samples, whatever ``reward.on_error``: a run that went on would train on zeros and
    finish as if it had learned (a broken grader, or workers that cannot start). A score
    of 0 is no failure: only calls that raised, timed out or crashed count."""
    for name, count in failed.items():
        if samples > 1 and count >= samples:
            failure = first[name]
            raise RewardError(
                f"reward function {name!r} failed (raised, timed out or crashed) on all "
                f"{samples} samples scored together: stopped rather than train on zeros. "
                f"First failure: sample {failure.sample_index} (row {failure.row_index}): "
                f"{failure.error_type}: {failure.message}. Fix the function; "
                "reward.on_error=zero scores a failed sample 0, but not every sample of a step"
            )


def _alarm(failed: dict[str, int], first: dict[str, RewardFailure], *, samples: int) -> None:
    """One warning per function that failed on more than ``ALARM_SHARE`` of the samples."""
    for name, count in failed.items():
        if samples > 1 and count > ALARM_SHARE * samples:
            logger.warning(
                "reward function %r failed on %d of the %d samples scored together and "
                "scored them 0: the policy learns nothing from them. First failure: %s: %s. "
                "Fix the function, or set reward.on_error=abort to stop at the first failure",
                name,
                count,
                samples,
                first[name].error_type,
                first[name].message,
            )
