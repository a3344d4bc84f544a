"""Reward functions by name: the built-ins, or your own by import path or file path.

Every reward function has one signature. It is called once per completion as::

    fn(completion_text, reference=row_answer, row=row_dict)

``completion_text`` is the decoded completion, ``reference`` the row's
``data.answer_key`` value and ``row`` the whole data row (with ``_index``, its
position in the source). It returns a number (a bool counts as 0/1); raising,
returning a non-number or NaN, or running past ``reward.sandbox.timeout_s`` counts as
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

from collections.abc import Callable
from typing import Any, Literal, NamedTuple

from grouprl.rewards.format import format_reward
from grouprl.rewards.math import math_answer
from grouprl.rewards.qa import exact_match, token_f1
from grouprl.sandbox.user_code import UserCode, a_function

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


REWARDS = UserCode(
    kind="reward",
    key="reward.functions.i.name",
    noun="reward function",
    error=RewardError,
    expects=a_function(),
    signature="fn(completion, *, reference, row, **kwargs) -> float",
    unknown=(
        "{key}={name!r} is not a registered reward function. {hint}Choose one of "
        "{names_list}, or give your own as `package.module:function` or "
        "`path/to/file.py:function`"
    ),
    workers="the reward worker processes",
)
"""Reward functions: the built-ins and ``register_reward``'s, or import paths."""

REWARD_FUNCTIONS: dict[str, RewardFn] = REWARDS.registry
"""The registered reward functions by name (the built-ins included)."""


def register_reward(name: str, fn: RewardFn) -> RewardFn:
    """Add ``fn`` to ``REWARD_FUNCTIONS`` as ``name``; a name is registered only once."""
    return REWARDS.register(name, fn)


register_reward("math_answer", math_answer)
register_reward("format", format_reward)
register_reward("qa_em", exact_match)
register_reward("qa_f1", token_f1)


def resolve_reward(name: str, *, index: int | None = None) -> RewardFn:
    """The function ``name`` refers to: registered, ``package.module:fn`` or ``file.py:fn``.

    ``index`` is the position in ``reward.functions``, used in error messages.
    """
    return REWARDS.resolve(name, key=_key(index))


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
    """Why each ``reward.functions`` entry would not resolve or reach the reward workers,
    as messages ([] when all do), by resolving them now: import paths are imported and
    files run, so a mistake shows before any model loads. ``missing_ok``: a module or file
    this machine lacks is not a problem (``grouprl submit``: the cluster may have it)."""
    problems = []
    names = [f.name for f in functions]
    for i, name in enumerate(names):
        if name in names[:i]:
            problems.append(_listed_twice(i, name))
        else:
            problems += REWARDS.problems(name, key=_key(i), missing_ok=missing_ok)
    return problems


def unsendable(name: str, fn: RewardFn, *, index: int) -> str | None:
    """Why the reward workers could not be sent ``fn`` (a registered lambda or nested
    function: functions go by reference), or None. Import paths are sent by name."""
    return REWARDS.unsendable(name, fn, key=_key(index))


def _key(index: int | None) -> str:
    return f"reward.functions.{'i' if index is None else index}.name"


def _listed_twice(index: int, name: str) -> str:
    return (
        f"reward.functions.{index}.name={name!r} is listed twice; list it once and set its weight"
    )
