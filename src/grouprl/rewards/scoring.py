"""Score completions with the configured reward functions in contained worker processes.

::

    completions[i], rows[i] ──► for each Reward (name, fn, weight, scope, style):
        grouprl sample, verl: one call per completion   ┐ all submitted at once to the
        grouprl group, trl:   one call per prompt group ┘ WorkerPool (reward.sandbox.workers)
                  │ numbers ─────────────────────────────────────────────► parts[name][i]
                  │ {"score": x, key: value, ...} (not trl) ──► x, and extras[name][i]:
                  │     tallied per function for metrics (extras.py; the run's
                  │     CategoryBound), shown per sample in samples.jsonl
                  │ None (trl): not applicable ──► parts[name][i] = None, not in total[i];
                  │     a sample every function returned None for fails ("no function applied")
                  │ raises / NaN / not a number / past timeout_s (killed) /
                  │ worker crash / out of memory / past step_timeout_s (abandoned)
                  ▼
        RewardFailure per failed call (failures.py), parts[name][i] = 0.0:
            on_error "drop" | "zero": returned in ``errors``; the rollout fails those
                                      samples (rollout/reward.fail); one warning per function
            on_error "raise":         RewardError at the first failure
            FailureBrake (the run's): a function's last failure_brake calls all failed
                                      (any errors, whenever in the run) ──► CannotTrain
                  ▼
        total[i] = sum over the functions that applied of weight * parts[name][i]

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
from collections.abc import Iterator
from concurrent.futures import Future
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
from grouprl.rewards.extras import CategoryBound, Extra, Scored, tally
from grouprl.rewards.failures import CannotTrain, FailureBrake, RewardFailure, log_failures
from grouprl.rewards.registry import Reward, RewardError, unsendable
from grouprl.rewards.scores import (  # noqa: F401 (re-exported: the step's metrics)
    OWN_METRICS,
    RewardScores,
    extra_metrics,
    metric_names,
    metrics,
)
from grouprl.sandbox import CallFailed, WorkerPool

OnError = Literal["drop", "zero", "raise"]

NOT_APPLIED = "(no function applied)"
"""The ``RewardFailure.function`` of a sample every function returned None for (TRL)."""


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
    at the first failure with ``on_error="raise"``, ``CannotTrain`` when the brake trips;
    otherwise failures are returned in ``errors``, never raised.
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
    errors += _not_applied(parts, rows, on_error=on_error)
    log_failures(errors, samples=len(completions), on_error=on_error)
    total = [
        sum(f.weight * x for f in functions if (x := parts[f.name][i]) is not None)
        for i in range(len(completions))
    ]
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
) -> tuple[
    dict[str, list[float | None]], dict[str, list[dict[str, Extra] | None]], list[RewardFailure]
]:
    """Each function's scores (None: a TRL None), extras (None where the call failed or did
    not apply) and the failures, the
    calls taken in the order submitted (so the brake counts a function's calls in sample
    order). On a ``RewardError`` (``raise``) or ``CannotTrain`` (the brake) the calls not
    done are abandoned: their workers stop at once."""
    parts: dict[str, list[float | None]] = {f.name: [0.0] * len(rows) for f in functions}
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
                failures = []
            if values is not None or failures[0].own:  # not surely its own: not counted
                brake.record(call.function, failures[0] if values is None else None)
            if failures and on_error == "raise":
                raise _raised(failures[0])
            errors += failures
            for j, value in enumerate(values or ()):
                if value is None:  # TRL's "not applicable": not in the sample's sum
                    parts[call.function][call.start + j] = None
                    continue
                score, found = value if isinstance(value, Scored) else (value, {})
                parts[call.function][call.start + j] = score
                extras[call.function][call.start + j] = found
    except (RewardError, CannotTrain):
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


def _not_applied(
    parts: dict[str, list[float | None]], rows: list[dict[str, Any]], *, on_error: OnError
) -> list[RewardFailure]:
    """A failure per sample every function returned None for. TRL warns and (since TRL
    1.6) leaves such a completion out of its group's baseline with advantage 0; nothing
    scored it, so here it is a failed sample (``reward.on_error``), but no function's own
    failure (``own`` False: the brake does not count it). Raises ``RewardError`` at the
    first with ``on_error="raise"``."""
    names = list(parts)
    out = []
    for i in range(len(rows)):
        if not names or any(parts[name][i] is not None for name in names):
            continue
        failure = RewardFailure(
            NOT_APPLIED,
            i,
            rows[i].get("_index"),
            "NotApplicable",
            f"every reward function ({', '.join(names)}) returned None for this sample "
            "(TRL's 'not applicable'), so nothing scores it. Fix: add a function that "
            "scores such rows, or leave them out of the data",
            own=False,
        )
        if on_error == "raise":
            raise _raised(failure)
        out.append(failure)
    return out
