"""What a reward worker process runs: one reward call, checked, by reference or by name.

The driver sends a function *reference* (``scoring.function_ref``): the function itself
(a built-in, or one registered with ``register_reward``: pickled by reference, so it must
be a module-level function of an importable module; with ``args``, the partial or the
replaced instance), or, for ``module:fn`` and ``path/to/file.py:fn`` names, the name
(``WithArgs`` with its args), which each worker resolves once (``REWARDS.load``,
``sandbox/user_code.py``: a file loads under a generated module name the worker could not
import by itself).

One call per style (``registry.call_style``): ``score_sample`` and ``score_group``
(grouprl's shapes), ``score_verl`` (verl's ``compute_score``, per completion), each value a
number or a dict with the number under ``score`` and extras beside it (``extras.py``), and
``score_trl`` (TRL's batched functions, per prompt group, as TRL calls them: numbers, or
None where the function does not apply).

``preload`` is the workers' initializer: it resolves the names and runs each reward's
``warm_up`` (``declares.WarmsUp``) before the worker takes calls, all within
``WARM_UP_S``; one that fails or runs past it is logged to the worker's stderr and the
worker serves anyway (a call then fails, or waits for the import, within its deadline).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import math
import numbers
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from grouprl.rewards.args import WithArgs, with_args
from grouprl.rewards.declares import WarmsUp
from grouprl.rewards.extras import Scored, extras_of
from grouprl.rewards.failures import SampleFailed
from grouprl.sandbox.user_code import awaited_call

logger = logging.getLogger(__name__)

FunctionRef = str | WithArgs | Callable[..., Any]
"""A reward function, or the import path a worker resolves it from (with its args)."""

VERL_SOURCE_KEY = "data_source"
"""The row column verl's reward manager reads ``data_source`` from (its ``reward_fn_key``
default); ``graders.verl_row_problems`` checks the data has it before anything loads."""

WARM_UP_S = 30.0
"""A worker's warm-ups (``preload``) together at most; below the pool's 60 s start limit."""


def score_sample(ref: FunctionRef, completion: str, *, reference: object, row: dict) -> Scored:
    """``fn(completion, reference=..., row=...)``: a finite score and its extras."""
    return scored(awaited_call(_function(ref), completion, reference=reference, row=row))


def score_group(
    ref: FunctionRef,
    completions: list[str],
    *,
    references: list[Any],
    rows: list[dict],
    prompts: list[str] | None = None,
) -> list[Scored | SampleFailed]:
    """``fn(completions, references=..., rows=...)``: one score (and extras) per completion;
    ``prompts`` given (a ``declares.ReadsPrompts`` reward): ``prompts=`` too. A
    ``SampleFailed`` value passes as it is: that sample alone fails (``scoring._collect``)."""
    more = {} if prompts is None else {"prompts": prompts}
    values = awaited_call(_function(ref), completions, references=references, rows=rows, **more)
    each = _one_each(values, len(completions))
    return [v if isinstance(v, SampleFailed) else scored(v) for v in each]


def score_verl(ref: FunctionRef, completion: str, *, reference: object, row: dict) -> Scored:
    """verl's ``compute_score(data_source=, solution_str=, ground_truth=, extra_info=)``
    as verl's ``NaiveRewardManager`` calls it (``extra_info`` only where the function takes
    it): the row's ``data_source`` (a row without one raises ``KeyError``, as verl's
    ``data_item.non_tensor_batch["data_source"]`` does), its ``extra_info`` or ``{}`` (verl's
    default). The value: a number, or a dict whose ``score`` is one, its other keys extras
    (verl's ``reward_extra_info``); None or a dict without ``score`` fails the call (verl
    stops the run on them)."""
    fn = _function(ref)
    if VERL_SOURCE_KEY not in row:
        raise KeyError(
            f"the row has no {VERL_SOURCE_KEY!r} column, which verl's compute_score is "
            f"called with (verl's reward manager requires it in every row). Fix: add a "
            f"{VERL_SOURCE_KEY!r} column (the dataset's name, as verl's data preprocessing "
            "writes it), or make the function a grouprl-style one (docs/rewards.md)"
        )
    kwargs = {
        "data_source": row[VERL_SOURCE_KEY],
        "solution_str": completion,
        "ground_truth": reference,
    }
    if _takes(fn, "extra_info"):
        extra_info = row.get("extra_info")
        kwargs["extra_info"] = {} if extra_info is None else extra_info
    return scored(awaited_call(fn, **kwargs))


def score_trl(
    ref: FunctionRef, completions: list[Any], *, prompts: list[Any], columns: dict[str, list]
) -> list[float | None]:
    """TRL's ``fn(completions=, prompts=, **columns) -> list[float | None]``, one prompt
    group per call: one score per completion, None where the function returned None (TRL's
    "not applicable": the scorer leaves the function out of that sample's sum)."""
    values = awaited_call(_function(ref), completions=completions, prompts=prompts, **columns)
    return [None if v is None else as_score(v) for v in _one_each(values, len(completions))]


def preload(refs: list[FunctionRef], *, warm_up_s: float = WARM_UP_S) -> None:
    """Worker initializer: import the reward functions named by path and run the rewards'
    ``warm_up`` before any call's deadline runs, within ``warm_up_s`` in all (module
    docstring). A name that fails to resolve fails its calls instead, with the reason."""
    deadline = time.monotonic() + warm_up_s
    for ref in refs:
        try:
            fn = _function(ref)
        except Exception:  # not logged here: each call of it fails with this reason
            continue
        if isinstance(fn, WarmsUp) and not _warmed_up(fn, deadline - time.monotonic()):
            return  # past the budget: the rest warm up in their first calls


def _warmed_up(fn: WarmsUp, budget_s: float) -> bool:
    """Runs ``fn.warm_up()`` on a thread for at most ``budget_s``; False when it did not
    end by then (the thread runs on, a daemon). A failure is logged, not raised."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn.warm_up()
        except BaseException as err:  # reported below; its calls fail with it, or not
            errors.append(err)

    thread = threading.Thread(target=run, name="grouprl-reward-warm-up", daemon=True)
    thread.start()
    thread.join(max(budget_s, 0.0))
    if thread.is_alive():
        logger.warning(
            "reward worker %d: the warm-up of %r did not end within %.3gs (what was left "
            "of the workers' warm-up budget); the worker takes calls now, each within its "
            "deadline (reward.sandbox.timeout_s)",
            os.getpid(),
            fn,
            budget_s,
        )
        return False
    if errors:
        logger.warning(
            "reward worker %d: the warm-up of %r failed (%s: %s); the worker takes calls "
            "anyway, which fail if they need what it could not do",
            os.getpid(),
            fn,
            type(errors[0]).__name__,
            errors[0],
        )
    return True


def scored(value: object) -> Scored:
    """A reward's value for one completion: a number, or a dict with the number under
    ``score`` and its other keys extras (``extras.extras_of``)."""
    if isinstance(value, Mapping):
        if "score" not in value:
            raise KeyError(
                f"returned a dict without 'score' (keys {sorted(map(str, value))}); a reward "
                "returns a number, or a dict with the number under 'score' and extras "
                "beside it (verl's compute_score does the same)"
            )
        return Scored(as_score(value["score"]), extras_of(value))
    return Scored(as_score(value), {})


def as_score(value: Any) -> float:
    """``value`` as a finite float (a bool is 0/1; numpy and 0-d tensor scalars work)."""
    if not isinstance(value, numbers.Real) and hasattr(value, "item"):
        with contextlib.suppress(Exception):  # not a scalar: reported below as not a number
            value = value.item()
    if not isinstance(value, numbers.Real):
        raise TypeError(f"returned {type(value).__name__} {value!r:.80}, not a number")
    score = float(value)
    if not math.isfinite(score):
        raise ValueError(f"returned {score}, not a finite number")
    return score


def _one_each(values: Any, count: int) -> list[Any]:
    """A batched call's return value as a list of ``count`` values (one per completion)."""
    if hasattr(values, "tolist"):  # a numpy array or tensor
        values = values.tolist()
    if not isinstance(values, list | tuple):
        raise TypeError(
            f"returned {type(values).__name__} {values!r:.80}; a batched reward returns a "
            f"list of {count} numbers, one per completion"
        )
    if len(values) != count:
        raise ValueError(
            f"returned {len(values)} scores for a group of {count} completions; return one "
            "per completion, in order"
        )
    return list(values)


def _takes(fn: Callable[..., Any], keyword: str) -> bool:
    """Whether ``fn`` accepts ``keyword`` (by name or through ``**kwargs``; one whose
    signature cannot be read is given it, as verl gives it)."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.name == keyword or p.kind is p.VAR_KEYWORD for p in parameters)


def _function(ref: FunctionRef) -> Callable[..., Any]:
    if not isinstance(ref, str | WithArgs):
        return ref
    from grouprl.rewards.registry import REWARDS  # only for names: it imports the built-ins

    if isinstance(ref, WithArgs):
        return with_args(REWARDS.load(ref.name), ref.args)
    return REWARDS.load(ref)
