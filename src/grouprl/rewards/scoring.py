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
                  │ SampleFailed (a group reward's one sample: a judge's timeout, HTTP
                  │     error, unparseable answer) ──► that sample alone fails, its kind
                  │     counted (reward/<fn>/failed/<kind>), the brake told per sample
                  │ raises / NaN / not a number / past timeout_s (killed, even in C code) /
                  │ worker crash / out of memory / past step_timeout_s (abandoned)
                  ▼
        RewardFailure per failed call (failures.py), parts[name][i] = 0.0:
            returned in ``errors``; the rollout fails those samples as ``reward.on_error``
            says (rollout/reward.fail, the one place that stops a run on ``raise``); one
            warning per function; with ``raise`` the calls after the first failure are
            abandoned (the rollout stops the run at that sample)
            FailureBrake (the run's): a function's last failure_brake calls all failed
                                      (any errors, whenever in the run) ──► CannotTrain
                  ▼
        total[i] = sum over the functions that applied of weight * parts[name][i]
"""

from __future__ import annotations

import concurrent.futures
import functools
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, NamedTuple

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
from grouprl.rewards.declares import Learned, ReadsPrompts, declared_categories
from grouprl.rewards.extras import CategoryBound, Extra, Scored, tally
from grouprl.rewards.failures import (
    CannotTrain,
    FailureBrake,
    RewardFailure,
    SampleFailed,
    kind_metrics,
    log_failures,
)
from grouprl.rewards.registry import Reward, RewardError, resolve_rewards, unsendable
from grouprl.rewards.scores import (  # noqa: F401 (extra_metrics: re-exported)
    RewardScores,
    agreement,
    extra_metrics,
    metric_names,
)
from grouprl.rewards.scores import metrics as score_metrics
from grouprl.sandbox import CallFailed, WorkerPool

if TYPE_CHECKING:
    from grouprl.config.containment import OnError
    from grouprl.config.reward import RewardConfig

NOT_APPLIED = "(no function applied)"
"""The ``RewardFailure.function`` of a sample every function returned None for (TRL)."""


class RewardScorer:
    """The run's reward functions (``reward.functions``, or ``functions`` resolved already),
    the pool of ``reward.sandbox.workers`` processes they run in (or the caller's ``pool``,
    which ``close()`` leaves open), the run's ``FailureBrake`` and its ``CategoryBound``
    (extras' categories); call it as ``scorer(completions=..., rows=..., group_size=n)``
    and ``close()`` it when the run ends. The workers start on the first call and import
    the functions before it (``calls.preload``: warm-ups too). ``answer_key``,
    ``prompt_key``: the rows' columns (TRL-style functions get the prompt as ``prompts``).
    ``decode``: prompt ids to text as the policy's tokenizer writes them (special tokens
    kept), for rewards that read the rendered prompts (``declares.ReadsPrompts``)."""

    def __init__(
        self,
        reward: RewardConfig,
        *,
        answer_key: str,
        prompt_key: str = "prompt",
        functions: list[Reward] | None = None,
        pool: WorkerPool | None = None,
        decode: Callable[[list[int]], str] | None = None,
    ) -> None:
        self.functions = resolve_rewards(reward.functions) if functions is None else functions
        for i, f in enumerate(self.functions):  # (a lambda: found now, not on every sample)
            if (problem := unsendable(f.entry, f.fn, index=i)) is not None:
                raise RewardError(problem)
        self.config, self.answer_key, self.prompt_key = reward, answer_key, prompt_key
        self.decode = decode
        self.brake = FailureBrake(reward.failure_brake)
        self.categories = CategoryBound()
        self._own_pool = pool is None
        refs = [function_ref(f) for f in self.functions]
        self.pool = pool or WorkerPool(
            reward.sandbox,
            name="reward",
            network=reward.network,
            initializer=functools.partial(preload, refs),
        )

    @property
    def reads_prompts(self) -> bool:
        """Whether a function reads the rendered prompts: the caller passes ``prompt_ids``."""
        return any(isinstance(f.fn, ReadsPrompts) for f in self.functions)

    def __call__(
        self,
        *,
        completions: list[str],
        rows: list[dict[str, Any]],
        group_size: int | None = None,
        prompt_ids: list[list[int]] | None = None,
    ) -> RewardScores:
        """Scores of ``completions[i]`` against ``rows[i]`` (rows repeat for a prompt's
        samples). ``group_size``: samples per prompt (prompt-major order) for group and TRL
        rewards; None: runs of rows with the same ``_index``. ``prompt_ids``: what the
        policy was given for each completion, decoded for ``ReadsPrompts`` rewards.
        Failures are returned in ``errors``, never raised; raises ``CannotTrain`` when the
        brake trips."""
        if len(completions) != len(rows):
            raise ValueError(f"{len(completions)} completions but {len(rows)} rows; pair them 1:1")
        functions, on_error = self.functions, self.config.on_error
        restarts_before = self.pool.stats()["restarts"]
        prompts = None
        if prompt_ids is not None and self.decode is not None and self.reads_prompts:
            prompts = [self.decode(ids) for ids in prompt_ids]
        calls = list(self._submit(completions, rows, group_size, prompts))
        parts, extras, errors = _collect(
            self.pool,
            calls,
            functions=functions,
            rows=rows,
            on_error=on_error,
            step_timeout_s=self.config.step_timeout_s,
            brake=self.brake,
        )
        restarts = self.pool.stats()["restarts"] - restarts_before
        errors += _not_applied(parts, rows)
        if on_error != "raise":  # (then the rollout's error says it)
            log_failures(errors, samples=len(completions), on_error=on_error)
        total = [
            sum(f.weight * x for f in functions if (x := parts[f.name][i]) is not None)
            for i in range(len(completions))
        ]
        tallies = {
            f.name: tally(
                f.name, extras[f.name], declared=declared_categories(f.fn), bound=self.categories
            )
            for f in functions
        }
        return RewardScores(
            total=total,
            parts=parts,
            errors=errors,
            worker_restarts=restarts,
            extras=extras,
            tallies=tallies,
            agreement=self._agreement(parts, extras, _groups(rows, group_size)),
        )

    def _agreement(
        self,
        parts: dict[str, list[float | None]],
        extras: dict[str, list[dict[str, Extra] | None]],
        groups: list[tuple[int, int]],
    ) -> dict[str, tuple[float, int]]:
        """Each learned function's ``scores.agreement`` with ``reward.correct_function``
        (none without one), over the samples both scored (a failed call's 0.0 is none)."""
        checker = self.config.correct_function
        if checker is None or checker not in parts:
            return {}

        def scored(name: str) -> list[float | None]:
            found = zip(parts[name], extras[name], strict=True)
            return [None if e is None else v for v, e in found]

        return {
            f.name: agreement(scored(f.name), scored(checker), groups)
            for f in self.functions
            if isinstance(f.fn, Learned) and f.name != checker
        }

    def _submit(
        self,
        completions: list[str],
        rows: list[dict[str, Any]],
        group_size: int | None,
        prompts: list[str] | None = None,
    ) -> Iterator[_Call]:
        """One ``_Call`` per reward call: per sample (grouprl ``sample``, verl) or per prompt
        group (grouprl ``group``, trl), as ``rewards/calls.py`` makes it."""
        pool, timeout_s = self.pool, self.config.sandbox.timeout_s
        references = [_field(row, self.answer_key) for row in rows]
        for f in self.functions:
            ref = function_ref(f)
            if f.style == "verl" or (f.style == "grouprl" and f.scope == "sample"):
                score = score_verl if f.style == "verl" else score_sample
                for i, text in enumerate(completions):
                    sample = {"reference": references[i], "row": rows[i]}
                    future = pool.submit(_one, score, ref, text, deadline_s=timeout_s, **sample)
                    yield _Call(f.name, i, 1, future)
                continue
            for start, stop in _groups(rows, group_size):
                group, group_rows = completions[start:stop], rows[start:stop]
                if f.style == "trl":
                    args, kwargs = _trl_call(group, group_rows, self.prompt_key)
                    future = pool.submit(score_trl, ref, *args, deadline_s=timeout_s, **kwargs)
                else:
                    reads = prompts is not None and isinstance(f.fn, ReadsPrompts)
                    future = pool.submit(
                        score_group,
                        ref,
                        group,
                        deadline_s=timeout_s,
                        references=references[start:stop],
                        rows=group_rows,
                        prompts=prompts[start:stop] if reads and prompts else None,
                    )
                yield _Call(f.name, start, stop - start, future)

    def close(self) -> None:
        if self._own_pool:
            self.pool.close()


def metrics(scores: RewardScores) -> dict[str, float]:
    """``scores.metrics`` and, where a reward reported failed samples itself
    (``SampleFailed``: a judge), ``reward/<fn>/failed/<kind>``, their count per kind."""
    names = metric_names(list(scores.parts))
    return score_metrics(scores) | kind_metrics(scores.errors, names)


class _Call(NamedTuple):
    function: str
    start: int
    size: int
    """Samples from ``start`` on; the future's value is a list of that many scores."""
    future: Future


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
    not apply) and the failures, the calls taken in the order submitted (so the brake
    counts a function's calls in sample order). At the first failure with ``on_error``
    "raise" (the rollout stops the run there), or at ``CannotTrain`` (the brake), the calls
    not done are abandoned: their workers stop at once."""
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
            if values is not None and any(isinstance(v, SampleFailed) for v in values):
                failures = _reported(values, call, rows, brake)  # those samples alone
            elif values is not None or failures[0].own:  # not surely its own: not counted
                brake.record(call.function, failures[0] if values is None else None)
            errors += failures
            if failures and on_error == "raise":
                pool.abandon([c.future for c in calls if not c.future.done()])
                break
            for j, value in enumerate(values or ()):
                if isinstance(value, SampleFailed):  # part 0.0, extras None: a failure
                    continue
                if value is None:  # TRL's "not applicable": not in the sample's sum
                    parts[call.function][call.start + j] = None
                    continue
                score, found = value if isinstance(value, Scored) else (value, {})
                parts[call.function][call.start + j] = score
                extras[call.function][call.start + j] = found
    except CannotTrain:
        pool.abandon([c.future for c in calls if not c.future.done()])
        raise
    return parts, extras, errors


def _reported(
    values: list[Any], call: _Call, rows: list[dict[str, Any]], brake: FailureBrake
) -> list[RewardFailure]:
    """A ``RewardFailure`` per sample of a group call that the reward reported failed
    (``SampleFailed``), the brake told of each sample in order (a success restarts its
    count: a judge that is down fails every sample, and trips it by samples, not calls)."""
    failures = []
    for j, value in enumerate(values):
        failure = None
        if isinstance(value, SampleFailed):
            i = call.start + j
            failure = RewardFailure(
                call.function,
                i,
                rows[i].get("_index"),
                value.error_type,
                value.message,
                kind=value.kind,
                reported=True,
            )
            failures.append(failure)
        brake.record(call.function, failure)
    return failures


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


def _trl_call(
    completions: list[str], rows: list[dict[str, Any]], prompt_key: str
) -> tuple[tuple, dict[str, Any]]:
    """TRL's arguments for a group: ``prompts`` (the rows' ``prompt_key`` values),
    ``completions`` (as messages where the prompt is a conversation, as TRL passes
    them) and the rows' other columns, each as a list (grouprl's own ``_`` fields left out)."""
    prompts = [_field(row, prompt_key) for row in rows]
    sent: list[Any] = completions
    if all(isinstance(p, list) for p in prompts):
        sent = [[{"role": "assistant", "content": text}] for text in completions]
    skip = {prompt_key, "prompts", "completions"}
    keys = [k for k in rows[0] if k not in skip and not k.startswith("_")]
    columns = {k: [row.get(k) for row in rows] for k in keys}
    return (sent,), {"prompts": prompts, "columns": columns}


def _one(
    score: Callable[..., Scored], ref: FunctionRef, text: str, *, reference: object, row: dict
) -> list[Scored]:
    """``score_sample`` or ``score_verl`` of one sample, as a list (a group's shape)."""
    return [score(ref, text, reference=reference, row=row)]


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
    parts: dict[str, list[float | None]], rows: list[dict[str, Any]]
) -> list[RewardFailure]:
    """A failure per sample every function returned None for. TRL warns and (since TRL
    1.6) leaves such a completion out of its group's baseline with advantage 0; nothing
    scored it, so here it is a failed sample (``reward.on_error``), but no function's own
    failure (``own`` False: the brake does not count it)."""
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
        out.append(failure)
    return out
