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
(an importable module). It may return a dict, ``{"score": number, key: value, ...}``:
the extras are logged per step (``extras.py``). ``args: {key: value}`` are its own
settings (``args.py``): keywords added to each call, or a registered dataclass instance's
fields replaced; one function may be listed twice with different args, the second's
scores named ``name_2`` (``part_names``).

verl's and TRL's reward functions run unmodified (``RewardFunction.style``, told from the
parameters by ``call_style`` before anything loads)::

    style    detected by                                   called
    verl     data_source, solution_str, ground_truth       once per completion, by keyword;
                                                           a number or {"score": number}
    trl      completions first (or prompts, completions),  once per prompt group:
             **kwargs, no reference(s)                     fn(completions=, prompts=, **columns);
                                                           numbers, None: not applicable
    grouprl  anything else that binds as ``scope`` says    fn(completion, reference=, row=)
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from grouprl.config.imports import is_import_path
from grouprl.rewards.args import args_problems, with_args
from grouprl.rewards.code import code_tests
from grouprl.rewards.declares import DeclaresScope, NeedsSeconds
from grouprl.rewards.format import format_reward
from grouprl.rewards.judge import llm_judge
from grouprl.rewards.math import math_answer
from grouprl.rewards.math_verify import math_verify_score
from grouprl.rewards.qa import exact_match, token_f1
from grouprl.rewards.reasoning_gym import reasoning_gym_score
from grouprl.rewards.reward_model import reward_model
from grouprl.sandbox.main_guard import rerun_by_spawn
from grouprl.sandbox.user_code import UserCode, a_function

if TYPE_CHECKING:
    from grouprl.config.reward import RewardFunction

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
    args: dict[str, Any] | None = None
    """The entry's ``args`` (``fn`` has them already; a worker applies them to a function
    named by path, ``scoring.function_ref``)."""
    source: str = ""
    """The entry's ``name`` where ``name`` differs from it (a function listed again with
    other args: ``name`` is then ``<name>_2``, ``part_names``)."""

    @property
    def entry(self) -> str:
        """The name the entry gives: a registered name or an import path."""
        return self.source or self.name


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
register_reward("reward_model", reward_model)  # a sequence classifier (docs/reward-models.md)
register_reward("llm_judge", llm_judge)  # a judge model's answer, parsed (docs/judges.md)


def resolve_reward(name: str, *, index: int | None = None) -> RewardFn:
    """The function ``name`` refers to: registered, ``package.module:fn`` or ``file.py:fn``.

    ``index`` is the position in ``reward.functions``, used in error messages.
    """
    return REWARDS.resolve(name, key=_key(index))


def resolve_rewards(functions: list[RewardFunction]) -> list[Reward]:
    """A ``Reward`` for each ``reward.functions`` entry (``RewardFunction`` records), with
    its ``args`` applied (``args.with_args``)."""
    for i in range(len(functions)):
        if (twice := _listed_twice(functions, i)) is not None:
            raise RewardError(twice)
    rewards = []
    for i, (f, part) in enumerate(zip(functions, part_names(functions), strict=True)):
        fn = resolve_reward(f.name, index=i)
        if problems := args_problems(fn, f.args, index=i, name=f.name):
            raise RewardError("; ".join(problems))
        fn = with_args(fn, f.args)  # a required keyword given by args binds the call
        f = declared_scope(fn, f)
        style = call_style(fn, f, index=i)
        source = f.name if part != f.name else ""
        rewards.append(Reward(part, fn, f.weight, f.scope, style, dict(f.args) or None, source))
    return rewards


def reward_styles(functions: list[RewardFunction]) -> list[str]:
    """How each entry is called (grouprl, verl, trl), for ``grouprl plan``'s reward row;
    [] when one does not resolve (``reward_problems`` says why)."""
    try:
        return [reward.style for reward in resolve_rewards(functions)]
    except RewardError:
        return []


def part_names(functions: list[RewardFunction]) -> list[str]:
    """The name each entry's scores go under (``RewardScores.parts``, samples.jsonl's
    ``scores``, metrics): its ``name``; an entry whose name an earlier entry has (the same
    function with other ``args``) gets the first free ``<name>_2``, ``<name>_3``, ...
    (``reward.correct_function`` names the first)."""
    names = [f.name for f in functions]
    taken, out = set(names), []
    for i, name in enumerate(names):
        part, k = name, 2
        if name in names[:i]:
            while f"{name}_{k}" in taken:
                k += 1
            part = f"{name}_{k}"
            taken.add(part)
        out.append(part)
    return out


def reward_problems(
    functions: list[RewardFunction], *, missing_ok: bool = False, timeout_s: float | None = None
) -> list[str]:
    """Why each ``reward.functions`` entry would not resolve, reach the reward workers,
    take the call its style makes or its ``args``, or fit in ``timeout_s``
    (``reward.sandbox.timeout_s``: a reward that needs longer, ``declares.NeedsSeconds``),
    as messages ([] when all do), by resolving them now: import paths are imported and
    files run, so a mistake shows before any model loads. ``missing_ok``: a module or
    file this machine lacks is not a problem (``grouprl submit``: the cluster may have it)."""
    problems = []
    for i, entry in enumerate(functions):
        if (twice := _listed_twice(functions, i)) is not None:
            problems.append(twice)
            continue
        fn, found = REWARDS.check(entry.name, key=_key(i), missing_ok=missing_ok)
        if fn is not None and not found:
            found = _call_problems(entry.name, fn, entry, index=i, timeout_s=timeout_s)
        problems += found
    return problems


def _call_problems(
    name: str, fn: RewardFn, entry: RewardFunction, *, index: int, timeout_s: float | None
) -> list[str]:
    """Why the workers could not call ``fn`` as ``entry`` says (``in_main``,
    ``call_style``, its ``args``, the seconds it needs against ``timeout_s``), as messages."""
    if (problem := in_main(name, fn, index=index)) is not None:
        return [problem]
    if problems := args_problems(fn, entry.args, index=index, name=name):
        return problems
    fn = with_args(fn, entry.args)
    try:
        call_style(fn, declared_scope(fn, entry), index=index)
    except RewardError as err:
        return [str(err)]
    return _seconds_problems(fn, entry, index=index, timeout_s=timeout_s)


def _seconds_problems(
    fn: RewardFn, entry: RewardFunction, *, index: int, timeout_s: float | None
) -> list[str]:
    """A reward that needs more than ``timeout_s`` (``reward.sandbox.timeout_s``) for a
    call by its own settings (``declares.NeedsSeconds``): the worker's deadline would
    kill the call, a reward failure, where the reward's own limit should have ended it."""
    if timeout_s is None or not isinstance(fn, NeedsSeconds):
        return []
    needs, setting = fn.call_s()
    if needs <= timeout_s:
        return []
    value = getattr(fn, setting)
    margin = needs - value
    arg = f"reward.functions.{index}.args.{setting}"
    given = "" if setting in (entry.args or {}) else " (its default)"
    lower = f", or {arg}={timeout_s - margin:g} or less" if timeout_s > margin else ""
    return [
        f"{arg}={value:g}{given} with reward.sandbox.timeout_s={timeout_s:g}: "
        f"{entry.name!r} needs up to {needs:g}s per call ({setting} plus {margin:g}s), past "
        "the deadline at which its worker kills a call: such a call is a reward failure "
        "(left out of training) where the reward's own limit would have scored it. Fix: set "
        f"reward.sandbox.timeout_s={needs:g} or more{lower}"
    ]


def declared_scope(fn: RewardFn, entry: RewardFunction) -> RewardFunction:
    """``entry`` with the scope ``fn`` declares (``declares.DeclaresScope``: a reward model
    scores a prompt group per call), so the user need not write it. The declared scope
    wins over the entry's: a ``scope: sample`` there is the default a saved config writes,
    not a choice (and such a reward takes no other call)."""
    if not isinstance(fn, DeclaresScope) or fn.scope == entry.scope:
        return entry
    return entry.model_copy(update={"scope": fn.scope})


def call_style(fn: RewardFn, entry: RewardFunction, *, index: int) -> Style:
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


def _listed_twice(functions: list[RewardFunction], index: int) -> str | None:
    """Entry ``index`` as a message when an earlier entry has its name and args both."""
    f = functions[index]
    if not any(g.name == f.name and g.args == f.args for g in functions[:index]):
        return None
    return (
        f"reward.functions.{index}.name={f.name!r} is listed twice with the same args; list "
        "it once and set its weight (the same function with other reward.functions.<i>.args "
        "is another reward)"
    )
