"""Score completions with the configured reward functions in contained worker processes.

::

    completions[i], rows[i] ──► for each Reward (name, fn, weight, scope, style):
        grouprl sample, verl: one call per completion   ┐ all submitted at once to the
        grouprl group, trl:   one call per prompt group ┘ WorkerPool (reward.sandbox.workers)
                  │ numbers ─────────────────────────────────────────────► parts[name][i]
                  │ {"score": x, key: value, ...} (not trl) ──► x, and extras[name][i]:
                  │     tallied per function for metrics (extras.py; the run's
                  │     CategoryBound), shown per sample in samples.jsonl
                  │ raises / NaN / not a number / None (trl) / past timeout_s (killed) /
                  │ worker crash / out of memory / past step_timeout_s (abandoned)
                  ▼
        RewardFailure per failed call (failures.py), parts[name][i] = 0.0:
            on_error "drop" | "zero": returned in ``errors``; the rollout fails those
                                      samples (rollout/reward.fail); one warning per function
            on_error "raise":         RewardError at the first failure
            FailureBrake (the run's): the first failure_brake calls of a function all
                                      failed the same way ──► RewardError
                  ▼
        total[i] = sum over functions of weight * parts[name][i]

Each call runs in a worker process (``grouprl.sandbox.WorkerPool``) with ``timeout_s``
as its deadline: a call that hangs (even inside C code) is killed with its process tree
and its worker replaced. ``step_timeout_s`` bounds the whole pass: past it the calls not
done are abandoned (``WorkerPool.abandon``) and fail as timeouts.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from grouprl.config.imports import absolute_import_path, is_import_path
from grouprl.data.sources import MISSING, get_field
from grouprl.rewards.args import WithArgs
from grouprl.rewards.calls import (
    FunctionRef,
    preload,
    score_group,
    score_sample,
    score_trl,
    score_verl,
)
from grouprl.rewards.declares import declared_categories
from grouprl.rewards.extras import CategoryBound, Extra, Scored, Tally, tally
from grouprl.rewards.failures import FailureBrake, RewardFailure, log_failures
from grouprl.rewards.registry import Reward, RewardError, unsendable
from grouprl.sandbox import CallFailed, WorkerPool

OnError = Literal["drop", "zero", "raise"]

OWN_METRICS = ("mean", "std", "overlong", "errors", "timeouts", "crashes", "memory_errors")
"""``reward/...`` metrics that are not a function's: a function is never logged as one."""


@dataclass
class RewardScores:
    total: list[float]
    """Weighted sum of the functions' scores, one per completion."""
    parts: dict[str, list[float]]
    """Each function's unweighted score per completion (0.0 where it failed)."""
    errors: list[RewardFailure] = field(default_factory=list)
    """The failed calls; the samples they cover are failed samples (``reward.on_error``)."""
    worker_restarts: int = 0
    """Reward workers replaced while scoring (killed at a deadline, crashed, out of memory)."""
    extras: dict[str, list[dict[str, Extra] | None]] = field(default_factory=dict)
    """Each function's extras per completion (``extras.py``): ``{}`` where it returned
    none, None where its call failed."""
    tallies: dict[str, Tally] = field(default_factory=dict)
    """Each function's extras tallied for the step's metrics (``metrics``)."""

    @staticmethod
    def concat(batches: list[RewardScores]) -> RewardScores:
        """The scores of several scoring calls, in order (errors keep their own indices)."""
        parts: dict[str, list[float]] = {}
        extras: dict[str, list[dict[str, Extra] | None]] = {}
        tallies: dict[str, Tally] = {}
        for scores in batches:
            for name, values in scores.parts.items():
                parts.setdefault(name, []).extend(values)
            for name, found in scores.extras.items():
                extras.setdefault(name, []).extend(found)
            for name, counted in scores.tallies.items():
                tallies.setdefault(name, Tally()).merge(counted)
        return RewardScores(
            total=[x for scores in batches for x in scores.total],
            parts=parts,
            errors=[e for scores in batches for e in scores.errors],
            worker_restarts=sum(scores.worker_restarts for scores in batches),
            extras=extras,
            tallies=tallies,
        )


class RewardScorer:
    """The run's reward functions, the pool of ``workers`` processes they run in, the
    run's ``FailureBrake`` and its ``CategoryBound`` (extras' categories); call it as
    ``scorer(completions=..., rows=..., group_size=n)`` and ``close()`` it when the run
    ends. The workers start on the first call and import the functions before it
    (``calls.preload``: warm-ups too). ``memory_limit``, ``network``: the workers'
    (``WorkerPool``)."""

    def __init__(
        self,
        *,
        functions: list[Reward],
        answer_key: str,
        on_error: OnError,
        timeout_s: float,
        workers: int,
        memory_mb: int | None,
        step_timeout_s: float | None = None,
        failure_brake: int | None = None,
        memory_limit: Literal["rss", "address_space"] = "rss",
        network: bool = False,
        prompt_key: str = "prompt",
    ) -> None:
        check_sendable(functions)
        self.functions = functions
        self.answer_key, self.prompt_key = answer_key, prompt_key
        self.on_error: OnError = on_error
        self.timeout_s, self.step_timeout_s = timeout_s, step_timeout_s
        self.brake = FailureBrake(failure_brake)
        self.categories = CategoryBound()
        refs = [function_ref(f) for f in functions]
        self.pool = WorkerPool(
            size=workers,
            memory_mb=memory_mb,
            name="reward",
            initializer=functools.partial(preload, refs),
            memory_limit=memory_limit,
            network=network,
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
            prompt_key=self.prompt_key,
            on_error=self.on_error,
            timeout_s=self.timeout_s,
            step_timeout_s=self.step_timeout_s,
            brake=self.brake,
            categories=self.categories,
            pool=self.pool,
            group_size=group_size,
        )

    def close(self) -> None:
        self.pool.close()


class _Call(NamedTuple):
    function: str
    start: int
    size: int
    """Samples from ``start`` on; the future's value is a list of that many scores."""
    future: Future


def score_completions(
    *,
    functions: list[Reward],
    completions: list[str],
    rows: list[dict[str, Any]],
    answer_key: str,
    on_error: OnError,
    timeout_s: float,
    step_timeout_s: float | None = None,
    brake: FailureBrake | None = None,
    categories: CategoryBound | None = None,
    pool: WorkerPool | None = None,
    group_size: int | None = None,
    prompt_key: str = "prompt",
) -> RewardScores:
    """Scores of ``completions[i]`` against ``rows[i]`` (rows repeat for a prompt's samples).

    ``functions`` as ``registry.resolve_rewards`` returns them. ``group_size``: samples per
    prompt (prompt-major order) for group and TRL rewards; None: runs of rows with the same
    ``_index``. Pass the run's long-lived ``pool``, ``brake`` and ``categories``; without a
    pool, one of one worker is started and closed within this call. Raises ``RewardError``
    at the first failure with ``on_error="raise"``, and when the brake trips; otherwise
    failures are returned in ``errors``, never raised.
    """
    if len(completions) != len(rows):
        raise ValueError(f"{len(completions)} completions but {len(rows)} rows; pair them 1:1")
    inputs = _Inputs(completions, rows, [_field(row, answer_key) for row in rows], prompt_key)
    with _pool_for_call(pool, functions) as workers:
        restarts_before = workers.stats()["restarts"]
        calls = list(_submit(workers, functions, inputs, group_size, timeout_s))
        parts, extras, errors = _collect(
            workers,
            calls,
            functions=functions,
            rows=rows,
            on_error=on_error,
            step_timeout_s=step_timeout_s,
            brake=brake if brake is not None else FailureBrake(None),
        )
        restarts = workers.stats()["restarts"] - restarts_before
    log_failures(errors, samples=len(completions), on_error=on_error)
    total = [sum(f.weight * parts[f.name][i] for f in functions) for i in range(len(completions))]
    bound = categories if categories is not None else CategoryBound()
    tallies = {
        f.name: tally(f.name, extras[f.name], declared=declared_categories(f.fn), bound=bound)
        for f in functions
    }
    return RewardScores(
        total=total,
        parts=parts,
        errors=errors,
        worker_restarts=restarts,
        extras=extras,
        tallies=tallies,
    )


def _collect(
    pool: WorkerPool,
    calls: list[_Call],
    *,
    functions: list[Reward],
    rows: list[dict[str, Any]],
    on_error: OnError,
    step_timeout_s: float | None,
    brake: FailureBrake,
) -> tuple[dict[str, list[float]], dict[str, list[dict[str, Extra] | None]], list[RewardFailure]]:
    """Each function's scores, extras (None where the call failed) and the failures, the
    calls taken in the order submitted (so the brake counts a function's calls in sample
    order). On a ``RewardError`` (``raise``, the brake) the calls not done are abandoned:
    their workers stop at once."""
    parts = {f.name: [0.0] * len(rows) for f in functions}
    extras: dict[str, list[dict[str, Extra] | None]] = {
        f.name: [None] * len(rows) for f in functions
    }
    errors: list[RewardFailure] = []
    deadline = None if step_timeout_s is None else time.monotonic() + step_timeout_s
    abandoned: set[int] = set()
    try:
        for call in calls:
            try:
                values = _result(call.future, deadline, pool, calls, abandoned)
            except CallFailed as failed:
                late = id(call.future) in abandoned and failed.kind == "timeout"
                failures = [_failure(failed, call, rows, step_timeout_s if late else None)]
                values = None
            else:
                failures = _none_scores(values, call, rows)
            brake.record(call.function, failures[0] if values is None else None)
            if failures and on_error == "raise":
                raise _raised(failures[0])
            errors += failures
            for j, value in enumerate(values or ()):
                if value is not None:  # a TRL None: failed above
                    score, found = value if isinstance(value, Scored) else (value, {})
                    parts[call.function][call.start + j] = score
                    extras[call.function][call.start + j] = found
    except RewardError:
        pool.abandon([c.future for c in calls if not c.future.done()])
        raise
    return parts, extras, errors


def _result(
    future: Future, deadline: float | None, pool: WorkerPool, calls: list[_Call], abandoned: set
) -> list[Scored] | list[float | None]:
    """``future``'s value; past the step's ``deadline`` first abandons every call not done
    (their ids into ``abandoned``), then raises the future's ``CallFailed``."""
    if deadline is None or abandoned:
        return future.result()
    try:
        return future.result(timeout=max(0.0, deadline - time.monotonic()))
    except concurrent.futures.TimeoutError:
        pending = [c.future for c in calls if not c.future.done()]
        abandoned.update(id(f) for f in pending)
        pool.abandon(pending)
        return future.result()


def _raised(failure: RewardFailure) -> RewardError:
    return RewardError(
        f"{failure.describe()}. reward.on_error=raise stops the run at the first failure. "
        "Fix the function, or set reward.on_error=drop (leave failed samples out of "
        "training) or reward.on_error=zero (train them as score 0)"
    )


class _Inputs(NamedTuple):
    completions: list[str]
    rows: list[dict[str, Any]]
    references: list[Any]
    prompt_key: str


def _submit(
    pool: WorkerPool,
    functions: list[Reward],
    inputs: _Inputs,
    group_size: int | None,
    timeout_s: float,
) -> Iterator[_Call]:
    """One ``_Call`` per reward call: per sample (grouprl ``sample``, verl) or per prompt
    group (grouprl ``group``, trl), as ``rewards/calls.py`` makes it."""
    completions, rows, references = inputs.completions, inputs.rows, inputs.references
    for f in functions:
        ref = function_ref(f)
        if f.style == "verl" or (f.style == "grouprl" and f.scope == "sample"):
            one = _one_verl if f.style == "verl" else _one_score
            for i, text in enumerate(completions):
                future = pool.submit(
                    one, ref, text, deadline_s=timeout_s, reference=references[i], row=rows[i]
                )
                yield _Call(f.name, i, 1, future)
            continue
        for start, stop in _groups(rows, group_size):
            if f.style == "trl":
                args, kwargs = _trl_call(completions[start:stop], rows[start:stop], inputs)
                future = pool.submit(score_trl, ref, *args, deadline_s=timeout_s, **kwargs)
            else:
                future = pool.submit(
                    score_group,
                    ref,
                    completions[start:stop],
                    deadline_s=timeout_s,
                    references=references[start:stop],
                    rows=rows[start:stop],
                )
            yield _Call(f.name, start, stop - start, future)


def _trl_call(
    completions: list[str], rows: list[dict[str, Any]], inputs: _Inputs
) -> tuple[tuple, dict[str, Any]]:
    """TRL's arguments for a group: ``prompts`` (the rows' ``prompt_key`` values),
    ``completions`` (as messages where the prompt is a conversation, as TRL passes
    them) and the rows' other columns, each as a list (grouprl's own ``_`` fields left out)."""
    prompts = [_field(row, inputs.prompt_key) for row in rows]
    sent: list[Any] = completions
    if all(isinstance(p, list) for p in prompts):
        sent = [[{"role": "assistant", "content": text}] for text in completions]
    skip = {inputs.prompt_key, "prompts", "completions"}
    keys = [k for k in rows[0] if k not in skip and not k.startswith("_")]
    columns = {k: [row.get(k) for row in rows] for k in keys}
    return (sent,), {"prompts": prompts, "columns": columns}


def _one_score(ref: FunctionRef, text: str, *, reference: Any, row: dict) -> list[Scored]:
    return [score_sample(ref, text, reference=reference, row=row)]


def _one_verl(ref: FunctionRef, text: str, *, reference: Any, row: dict) -> list[Scored]:
    return [score_verl(ref, text, reference=reference, row=row)]


def _groups(rows: list[dict[str, Any]], group_size: int | None) -> list[tuple[int, int]]:
    if group_size is not None:
        if group_size < 1 or len(rows) % group_size:
            raise ValueError(f"{len(rows)} samples do not split into groups of {group_size}")
        return [(s, s + group_size) for s in range(0, len(rows), group_size)]
    bounds = [i for i in range(1, len(rows)) if rows[i].get("_index") != rows[i - 1].get("_index")]
    starts = [0, *bounds]
    return list(zip(starts, [*bounds, len(rows)], strict=True))


def function_ref(f: Reward) -> FunctionRef:
    """What a worker gets for ``f``: an import path (resolved there, once per worker; with
    its args, ``WithArgs``), or the function itself (built-in or registered: pickled by
    reference; with args, the partial or the replaced instance, ``args.with_args``)."""
    if not is_import_path(f.entry):
        return f.fn
    path = absolute_import_path(f.entry)
    return WithArgs(path, dict(f.args)) if f.args else path


def check_sendable(functions: list[Reward]) -> None:
    """Raise if a registered function cannot be sent to the reward workers (a lambda, a
    nested function, one defined in a notebook): found when the run starts, not as an
    error on every sample."""
    for i, f in enumerate(functions):
        if (problem := unsendable(f.entry, f.fn, index=i)) is not None:
            raise RewardError(problem)


def metrics(scores: RewardScores) -> dict[str, float]:
    """``reward/errors`` (every failed call), of which ``reward/timeouts``,
    ``reward/crashes`` and ``reward/memory_errors``; ``reward/worker_restarts``; each
    function's mean score under its short name (``metric_names``), and its extras under
    it (``extra_metrics``)."""
    kinds = [e.kind for e in scores.errors]
    out = {
        "reward/errors": float(len(kinds)),
        "reward/timeouts": float(kinds.count("timeout")),
        "reward/crashes": float(kinds.count("crash")),
        "reward/memory_errors": float(kinds.count("memory")),
        "reward/worker_restarts": float(scores.worker_restarts),
    }
    names = metric_names(list(scores.parts))
    for name, values in scores.parts.items():
        if values:
            out[names[name]] = sum(values) / len(values)
    return out | extra_metrics(scores)


def extra_metrics(scores: RewardScores) -> dict[str, float]:
    """Each function's extras under its metric name: ``reward/<fn>/<key>/<category>``, the
    share of its scored samples in the category, and ``reward/<fn>/<key>``, a number's
    mean (``extras.py``)."""
    names = metric_names(list(scores.parts))
    out: dict[str, float] = {}
    for name, counted in scores.tallies.items():
        out.update(counted.metrics(names[name]))
    return out


def metric_names(functions: list[str]) -> dict[str, str]:
    """Each function's metric, ``reward/<short name>``: a name given by path
    (``/abs/path/file.py:fn``, ``pkg.mod:fn``) is its attribute, ``fn``. A short name
    taken, by a function listed earlier or by a metric of the reward's own (``mean``,
    ``errors``, ...), gets the first free suffix, ``fn_2``, ``fn_3``, ..."""
    taken = {*OWN_METRICS, "worker_restarts"}
    out = {}
    for name in functions:
        short = name.rpartition(":")[2] if is_import_path(name) else name
        candidate, k = short, 1
        while candidate in taken:
            k += 1
            candidate = f"{short}_{k}"
        taken.add(candidate)
        out[name] = f"reward/{candidate}"
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


def _field(row: dict[str, Any], key: str) -> Any:
    value = get_field(row, key)
    return None if value is MISSING else value


def _failure(
    failed: CallFailed, call: _Call, rows: list[dict[str, Any]], step_timeout_s: float | None
) -> RewardFailure:
    """The ``RewardFailure`` of a failed call; ``step_timeout_s`` set: the step's deadline
    abandoned it (not counted as the function's own)."""
    message = failed.message.removeprefix(f"{failed.error_type}: ")
    if step_timeout_s is not None:
        message = (
            f"not scored within reward.step_timeout_s={step_timeout_s:g}s, the step's "
            "scoring deadline (stopped, or never started). Fix: make the function faster, "
            "or raise reward.step_timeout_s or reward.sandbox.workers"
        )
    return RewardFailure(
        call.function,
        call.start,
        rows[call.start].get("_index"),
        failed.error_type,
        message,
        kind=failed.kind,
        samples=call.size,
        own=failed.own and step_timeout_s is None,
    )


def _none_scores(
    values: Sequence[object], call: _Call, rows: list[dict[str, Any]]
) -> list[RewardFailure]:
    """A failure per sample a TRL function returned None for (TRL's "not applicable")."""
    return [
        RewardFailure(
            call.function,
            call.start + j,
            rows[call.start + j].get("_index"),
            "TypeError",
            "returned None for this completion (TRL's 'not applicable'), not a number",
        )
        for j, value in enumerate(values)
        if value is None
    ]
