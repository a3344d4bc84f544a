"""What a reward worker process runs: one reward call, checked, by reference or by name.

The driver sends a function *reference* (``scoring.function_ref``): the function itself
(a built-in, or one registered with ``register_reward``: pickled by reference, so it must
be a module-level function of an importable module) or, for ``module:fn`` and
``path/to/file.py:fn`` names, the name, which each worker resolves once (``REWARDS.load``,
``sandbox/user_code.py``: a file loads under a generated module name the worker could not
import by itself).

One call per style (``registry.call_style``): ``score_sample`` and ``score_group``
(grouprl's shapes), ``score_verl`` (verl's ``compute_score``, per completion) and
``score_trl`` (TRL's batched functions, per prompt group, as TRL calls them).
"""

from __future__ import annotations

import contextlib
import inspect
import math
import numbers
from collections.abc import Callable
from typing import Any

from grouprl.sandbox.user_code import awaited_call

FunctionRef = str | Callable[..., Any]
"""A reward function, or the import path a worker resolves it from."""


def score_sample(ref: FunctionRef, completion: str, *, reference: Any, row: dict) -> float:
    """``fn(completion, reference=..., row=...)`` as a finite float."""
    return as_score(awaited_call(_function(ref), completion, reference=reference, row=row))


def score_group(
    ref: FunctionRef, completions: list[str], *, references: list[Any], rows: list[dict]
) -> list[float]:
    """``fn(completions, references=..., rows=...)``: one finite float per completion."""
    values = awaited_call(_function(ref), completions, references=references, rows=rows)
    return [as_score(v) for v in _one_each(values, len(completions))]


def score_verl(ref: FunctionRef, completion: str, *, reference: Any, row: dict) -> float:
    """verl's ``compute_score(data_source=, solution_str=, ground_truth=, extra_info=)``
    as verl's reward manager calls it (``extra_info`` only where the function takes it):
    a number, or a dict whose ``score`` is one (verl's extra metrics are not used)."""
    fn = _function(ref)
    kwargs = {
        "data_source": row.get("data_source"),
        "solution_str": completion,
        "ground_truth": reference,
    }
    if _takes(fn, "extra_info"):
        kwargs["extra_info"] = row.get("extra_info")
    value = awaited_call(fn, **kwargs)
    if isinstance(value, dict):
        if "score" not in value:
            raise KeyError(
                f"returned a dict without 'score' (keys {sorted(value)}); verl's "
                "compute_score returns a number or a dict with the number under 'score'"
            )
        value = value["score"]
    return as_score(value)


def score_trl(
    ref: FunctionRef, completions: list[Any], *, prompts: list[Any], columns: dict[str, list]
) -> list[float | None]:
    """TRL's ``fn(completions=, prompts=, **columns) -> list[float]``, one prompt group per
    call: one score per completion, None where the function returned None (TRL's "not
    applicable"; the scorer fails that sample alone)."""
    values = awaited_call(_function(ref), completions=completions, prompts=prompts, **columns)
    return [None if v is None else as_score(v) for v in _one_each(values, len(completions))]


def preload(refs: list[FunctionRef]) -> None:
    """Worker initializer: import the reward functions before any call's deadline runs
    (a name that fails to resolve fails its calls instead, with the reason)."""
    for ref in refs:
        if isinstance(ref, str):
            with contextlib.suppress(Exception):
                _function(ref)


def as_score(value: Any) -> float:
    """``value`` as a finite float (a bool is 0/1; numpy and 0-d tensor scalars work)."""
    if not isinstance(value, numbers.Real) and hasattr(value, "item"):
        try:
            value = value.item()
        except Exception:  # not a scalar: reported below as not a number
            pass
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
    if not isinstance(ref, str):
        return ref
    from grouprl.rewards.registry import REWARDS  # only for names: it imports the built-ins

    return REWARDS.load(ref)
