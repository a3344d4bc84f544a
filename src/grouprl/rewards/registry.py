"""Reward functions by name: the built-ins, or your own by import path or file path.

A grouprl-style reward function (``scope: sample``, the default) is called once per
completion as::

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

verl's and TRL's reward functions run unmodified (``RewardFunction.style``, told from the
parameters by ``call_style`` before anything loads)::

    style    detected by                                   called
    verl     data_source, solution_str, ground_truth       once per completion, by keyword;
                                                           a number or {"score": number}
    trl      completions first (or prompts, completions),  once per prompt group:
             **kwargs, no reference(s)                     fn(completions=, prompts=, **columns)
    grouprl  anything else that binds as ``scope`` says    fn(completion, reference=, row=)
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

from grouprl.config.imports import is_import_path
from grouprl.rewards.code import code_tests
from grouprl.rewards.format import format_reward
from grouprl.rewards.math import math_answer
from grouprl.rewards.math_verify import math_verify_score
from grouprl.rewards.qa import exact_match, token_f1
from grouprl.rewards.reasoning_gym import reasoning_gym_score
from grouprl.sandbox.main_guard import rerun_by_spawn
from grouprl.sandbox.user_code import UserCode, a_function

RewardFn = Callable[..., Any]
Style = Literal["grouprl", "verl", "trl"]

VERL_PARAMETERS = ("data_source", "solution_str", "ground_truth")
"""What verl's ``compute_score`` is called with (and ``extra_info``, where it takes it)."""

GROUPRL_KEYWORDS = ("reference", "references", "row", "rows")

CALLS = {
    ("grouprl", "sample"): "fn(completion, reference=..., row=...)",
    ("grouprl", "group"): "fn(completions, references=..., rows=...)",
    ("verl", "sample"): "fn(data_source=..., solution_str=..., ground_truth=..., extra_info=...)",
    ("trl", "sample"): "fn(completions=[...], prompts=[...], **columns)",
}
"""How each style's function is called (``rewards/calls.py``), for messages."""

STYLES = (
    "grouprl `fn(completion, *, reference, row, **kwargs)` (scope: sample) or "
    "`fn(completions, *, references, rows, **kwargs) -> list` (scope: group); verl "
    "`compute_score(data_source, solution_str, ground_truth, extra_info=None)`; trl "
    "`fn(completions, prompts=None, **kwargs) -> list[float]`"
)


class Reward(NamedTuple):
    """One ``reward.functions`` entry, resolved."""

    name: str
    fn: RewardFn
    weight: float
    scope: Literal["sample", "group"] = "sample"
    style: Style = "grouprl"
    """How it is called (``call_style``): ``scope`` applies to ``grouprl`` only; ``verl``
    is called per completion and ``trl`` per prompt group."""


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
register_reward("math_verify", math_verify_score)  # the graders extra: math-verify
register_reward("reasoning_gym", reasoning_gym_score)  # the graders extra: reasoning-gym
register_reward("code_tests", code_tests)  # a program against its tests, sandboxed


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
    rewards = []
    for i, f in enumerate(functions):
        fn = resolve_reward(f.name, index=i)
        rewards.append(Reward(f.name, fn, f.weight, f.scope, call_style(fn, f, index=i)))
    return rewards


def reward_problems(functions: list[Any], *, missing_ok: bool = False) -> list[str]:
    """Why each ``reward.functions`` entry would not resolve, reach the reward workers or
    take the call its style makes, as messages ([] when all do), by resolving them now:
    import paths are imported and files run, so a mistake shows before any model loads.
    ``missing_ok``: a module or file this machine lacks is not a problem (``grouprl
    submit``: the cluster may have it)."""
    problems = []
    names = [f.name for f in functions]
    for i, (name, entry) in enumerate(zip(names, functions, strict=True)):
        if name in names[:i]:
            problems.append(_listed_twice(i, name))
            continue
        fn, found = REWARDS.check(name, key=_key(i), missing_ok=missing_ok)
        if fn is not None and not found:
            found = _call_problems(name, fn, entry, index=i)
        problems += found
    return problems


def _call_problems(name: str, fn: RewardFn, entry: Any, *, index: int) -> list[str]:
    """Why the workers could not call ``fn`` as ``entry`` says (``in_main``,
    ``call_style``), as messages."""
    if (problem := in_main(name, fn, index=index)) is not None:
        return [problem]
    try:
        call_style(fn, entry, index=index)
    except RewardError as err:
        return [str(err)]
    return []


def call_style(fn: RewardFn, entry: Any, *, index: int) -> Style:
    """How ``fn`` is called, from its ``RewardFunction`` ``entry``: the declared
    ``style``, or with ``auto`` the one its parameters show (module docstring). Raises
    ``RewardError`` naming the key when the parameters do not take that call."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # some C callables have none: called as declared
        return "grouprl" if entry.style == "auto" else entry.style
    style = entry.style if entry.style != "auto" else _detected(signature, entry.scope)
    if style == "verl" and entry.scope == "group" and "scope" in entry.model_fields_set:
        raise RewardError(
            f"reward.functions.{index}.scope='group' with a verl-style function "
            f"{entry.name!r}: verl's compute_score scores one completion per call. Fix: "
            "remove scope, or write a grouprl group function (docs/rewards.md)"
        )
    if not _binds(signature, style, entry.scope):
        call = CALLS[style, entry.scope if style == "grouprl" else "sample"]
        if entry.style == "auto":
            found = f"{_key(index)}={entry.name!r}: its parameters {signature} fit no style"
        else:
            found = (
                f"reward.functions.{index}.style={entry.style!r}: {entry.name!r} has the "
                f"parameters {signature}"
            )
        raise RewardError(
            f"{found}; as {style} it is called {call}, which they do not take. The styles "
            f"are {STYLES}. Fix: give the function one of these signatures (**kwargs takes "
            f"the keywords you do not use), or set reward.functions.{index}.style"
        )
    return style


def in_main(name: str, fn: RewardFn, *, index: int) -> str | None:
    """Why ``fn``, registered as ``name``, is out of the reward workers' reach for being
    defined in a ``__main__`` that spawn does not re-run there (a notebook, ``python -c``),
    or None. It would pickle here and fail in every worker ("Can't get attribute")."""
    if is_import_path(name) or getattr(fn, "__module__", None) != "__main__":
        return None
    main = sys.modules.get("__main__")
    if main is not None and rerun_by_spawn(main):
        return None  # a script: each worker imports it again (as __mp_main__)
    attr = getattr(fn, "__name__", "fn")
    return (
        f"{_key(index)}={name!r}: the function registered under this name is defined in "
        "__main__ (a notebook or `python -c`), which the reward worker processes cannot "
        "import (reward functions always run in them). Fix: move it to a file and name it "
        f"by path, reward.functions=[{{name: path/to/file.py:{attr}}}], or register it "
        "from a module you import"
    )


def _detected(signature: inspect.Signature, scope: str) -> Style:
    parameters = signature.parameters
    if all(p in parameters for p in VERL_PARAMETERS):
        return "verl"
    positional = [
        p.name
        for p in parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in parameters.values())
    trl_first = positional[:1] == ["completions"] or positional[:2] == ["prompts", "completions"]
    if (
        trl_first
        and takes_kwargs
        and scope == "sample"  # scope: group is grouprl's group shape
        and not any(p in parameters for p in GROUPRL_KEYWORDS)
    ):
        return "trl"
    return "grouprl"


def _binds(signature: inspect.Signature, style: Style, scope: str) -> bool:
    """Whether ``signature`` takes the call ``style`` makes (``rewards/calls.py``); a
    TRL function's other parameters are dataset columns, known only at the call."""
    if style == "verl":
        call = ((), dict.fromkeys(VERL_PARAMETERS))
    elif style == "trl":
        columns = {
            name: None
            for name, p in signature.parameters.items()
            if p.default is p.empty
            and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
            and name not in ("completions", "prompts")
        }
        call = ((), {"completions": [], "prompts": [], **columns})
    elif scope == "group":
        call = (([""],), {"references": [None], "rows": [{}]})
    else:
        call = (("",), {"reference": None, "row": {}})
    try:
        signature.bind(*call[0], **call[1])
    except TypeError:
        return False
    return True


def unsendable(name: str, fn: RewardFn, *, index: int) -> str | None:
    """Why the reward workers could not be sent ``fn`` (a registered lambda or nested
    function: functions go by reference; one defined in a notebook's ``__main__``), or
    None. Import paths are sent by name."""
    return REWARDS.unsendable(name, fn, key=_key(index)) or in_main(name, fn, index=index)


def _key(index: int | None) -> str:
    return f"reward.functions.{'i' if index is None else index}.name"


def _listed_twice(index: int, name: str) -> str:
    return (
        f"reward.functions.{index}.name={name!r} is listed twice; list it once and set its weight"
    )
