"""Reward functions by name: the built-ins, or your own by import path or file path.

Every reward function has one signature. It is called once per completion as::

    fn(completion_text, reference=row_answer, row=row_dict)

``completion_text`` is the decoded completion, ``reference`` the row's
``data.answer_key`` value and ``row`` the whole data row (with ``_index``, its
position in the source). It returns a number (a bool counts as 0/1); raising,
returning a non-number or NaN, or running past ``reward.timeout_s`` counts as
an error (see ``reward.on_error``). Accept ``**kwargs`` so new keywords do not
break it. An example user function in ``my_rewards.py``::

    def short_and_right(completion: str, *, reference: str, **kwargs) -> float:
        right = completion.strip().endswith(f"#### {reference.split('####')[-1].strip()}")
        return float(right) - 0.001 * len(completion.split())

used from a recipe as ``reward.functions: [{name: my_rewards.py:short_and_right}]``
(a file, relative to where you run) or ``{name: my_pkg.rewards:short_and_right}``
(an importable module).
"""

from __future__ import annotations

import difflib
import pickle
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

from grouprl.config.imports import absent_here, is_import_path, load_attr
from grouprl.rewards.format import format_reward
from grouprl.rewards.math import math_answer
from grouprl.rewards.qa import exact_match, token_f1

RewardFn = Callable[..., Any]


class Reward(NamedTuple):
    """One ``reward.functions`` entry, resolved."""

    name: str
    fn: RewardFn
    weight: float
    scope: Literal["sample", "group"] = "sample"


class RewardError(ValueError):
    """A reward function that cannot be found, loaded or run; the message says which and why."""

    user_error = True


REWARD_FUNCTIONS: dict[str, RewardFn] = {}


def register_reward(name: str, fn: RewardFn) -> RewardFn:
    """Add ``fn`` to ``REWARD_FUNCTIONS`` as ``name``; a name is registered only once."""
    if not isinstance(name, str) or not name.strip() or ":" in name:
        raise RewardError(
            f"register_reward: name={name!r}; a reward's name is a non-empty string "
            "without ':' (that marks an import path). Fix: e.g. register_reward('short', fn)"
        )
    if not callable(fn):
        raise RewardError(
            f"register_reward({name!r}, ...): a {type(fn).__name__} is not a function; pass "
            "fn(completion, *, reference, row, **kwargs) -> float"
        )
    if name in REWARD_FUNCTIONS:
        raise RewardError(
            f"register_reward: reward function {name!r} is already registered; choose "
            f"another name (taken: {sorted(REWARD_FUNCTIONS)})"
        )
    REWARD_FUNCTIONS[name] = fn
    return fn


register_reward("math_answer", math_answer)
register_reward("format", format_reward)
register_reward("qa_em", exact_match)
register_reward("qa_f1", token_f1)


def resolve_reward(name: str, *, index: int | None = None) -> RewardFn:
    """The function ``name`` refers to: registered, ``package.module:fn`` or ``file.py:fn``.

    ``index`` is the position in ``reward.functions``, used in error messages.
    """
    key = f"reward.functions.{'i' if index is None else index}.name"
    if name in REWARD_FUNCTIONS:
        return REWARD_FUNCTIONS[name]
    if ":" not in name:
        close = difflib.get_close_matches(name, list(REWARD_FUNCTIONS), n=1)
        hint = f"Did you mean {close[0]!r}? " if close else ""
        raise RewardError(
            f"{key}={name!r} is not a registered reward function. {hint}Choose one of "
            f"{sorted(REWARD_FUNCTIONS)}, or give your own as `package.module:function` "
            "or `path/to/file.py:function`"
        )
    _, fn = load_attr(name, key=key, error=RewardError, kind="reward")
    if not callable(fn):
        attr = name.rpartition(":")[2]
        raise RewardError(f"{key}={name!r}: {attr!r} is a {type(fn).__name__}, not a function")
    return fn


def resolve_rewards(functions: list[Any]) -> list[Reward]:
    """A ``Reward`` for each ``reward.functions`` entry (``RewardFunction`` records)."""
    names = [f.name for f in functions]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise RewardError(_listed_twice(i, name))
    return [
        Reward(f.name, resolve_reward(f.name, index=i), f.weight, f.scope)
        for i, f in enumerate(functions)
    ]


def reward_problems(functions: list[Any], *, missing_ok: bool = False) -> list[str]:
    """Why each ``reward.functions`` entry would not resolve, as messages ([] when all do),
    by resolving them now: import paths are imported and files run, so a mistake shows
    before any model loads. ``missing_ok``: a module or file this machine lacks is not a
    problem (``grouprl submit``: the cluster may have it)."""
    problems = []
    names = [f.name for f in functions]
    for i, name in enumerate(names):
        if name in names[:i]:
            problems.append(_listed_twice(i, name))
            continue
        if missing_ok and _absent_here(name):
            continue
        try:
            fn = resolve_reward(name, index=i)
        except RewardError as err:
            problems.append(str(err))
            continue
        if (problem := unsendable(name, fn, index=i)) is not None:
            problems.append(problem)
    return problems


def unsendable(name: str, fn: RewardFn, *, index: int) -> str | None:
    """Why the reward workers could not be sent ``fn`` (a registered lambda or nested
    function: functions go by reference), or None. Import paths are sent by name."""
    if is_import_path(name):
        return None
    try:
        pickle.dumps(fn)
    except Exception as err:
        return (
            f"reward.functions.{index}.name={name!r}: the function registered under this name "
            f"cannot be sent to the reward worker processes ({type(err).__name__}: {err}). "
            "Register a module-level function (not a lambda or a nested function) of a "
            "module they can import, or name it `package.module:function` or "
            "`path/to/file.py:function`"
        )
    return None


def _listed_twice(index: int, name: str) -> str:
    return (
        f"reward.functions.{index}.name={name!r} is listed twice; list it once and set its weight"
    )


def _absent_here(name: str) -> bool:
    """Whether ``name`` points at a file or a top-level module this machine does not have."""
    return name not in REWARD_FUNCTIONS and is_import_path(name) and absent_here(name)
