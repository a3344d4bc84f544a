"""What a reward worker process runs: one reward call, checked, by reference or by name.

The driver sends a function *reference* (``scoring.function_ref``): the function itself
(a built-in, or one registered with ``register_reward``: pickled by reference, so it must
be a module-level function of an importable module) or, for ``module:fn`` and
``path/to/file.py:fn`` names, the name, which each worker resolves once (``REWARDS.load``,
``sandbox/user_code.py``: a file loads under a generated module name the worker could not
import by itself).
"""

from __future__ import annotations

import contextlib
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
    if hasattr(values, "tolist"):  # a numpy array or tensor
        values = values.tolist()
    if not isinstance(values, list | tuple):
        raise TypeError(
            f"returned {type(values).__name__} {values!r:.80}; a group reward returns a list "
            f"of {len(completions)} numbers, one per completion"
        )
    if len(values) != len(completions):
        raise ValueError(
            f"returned {len(values)} scores for a group of {len(completions)} completions; "
            "return one per completion, in order"
        )
    return [as_score(v) for v in values]


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


def _function(ref: FunctionRef) -> Callable[..., Any]:
    if not isinstance(ref, str):
        return ref
    from grouprl.rewards.registry import REWARDS  # only for names: it imports the built-ins

    return REWARDS.load(ref)
