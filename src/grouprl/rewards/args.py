"""``reward.functions[i].args``: a reward's own settings from the config, as verl's
``custom_reward_function.reward_kwargs``::

    a function (or a callable object)   functools.partial(fn, **args): keywords added to
                                        every call
    a dataclass instance (code_tests)   dataclasses.replace(fn, **args): a new instance
                                        with those fields, its ``__post_init__`` checking

Checked before anything loads (``args_problems``, from ``registry.reward_problems``): a
key the reward does not take, a keyword every call passes already, a value of the wrong
type, one the dataclass refuses. A registered reward gets its args in the driver and is
sent as the result; one named by path is sent as ``WithArgs`` and gets them in each
worker, after its import (``calls._function``).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
import typing
from typing import Any, NamedTuple

CALL_KEYWORDS = (
    "completion",
    "completions",
    "reference",
    "references",
    "row",
    "rows",
    "prompts",
    "data_source",
    "solution_str",
    "ground_truth",
    "extra_info",
)
"""Keywords the scorer passes itself (``registry.CALLS``): an arg of the same name would be
overridden on every call, so it is refused."""


class WithArgs(NamedTuple):
    """A reward named by import path with its args: what the workers get for it."""

    name: str
    args: dict[str, Any]


def with_args(fn: Any, args: dict[str, Any]) -> Any:
    """``fn`` with ``args`` (module docstring): a replaced dataclass instance, or a partial."""
    if not args:
        return fn
    if dataclasses.is_dataclass(fn) and not isinstance(fn, type):
        return dataclasses.replace(fn, **args)
    return functools.partial(fn, **args)


def args_problems(fn: Any, args: dict[str, Any], *, index: int, name: str) -> list[str]:
    """Why ``args`` do not fit the reward ``fn`` (entry ``index``, named ``name``), as
    messages naming ``reward.functions.<index>.args.<key>`` ([]: they fit)."""
    if not args:
        return []
    key = f"reward.functions.{index}.args"
    if dataclasses.is_dataclass(fn) and not isinstance(fn, type):
        return _setting_problems(fn, args, key=key, name=name)
    return _keyword_problems(fn, args, key=key, name=name)


def _setting_problems(fn: Any, args: dict[str, Any], *, key: str, name: str) -> list[str]:
    cls = type(fn)
    settings = [f.name for f in dataclasses.fields(fn) if f.init]
    hints = _hints(cls)
    problems = []
    for arg, value in args.items():
        if arg not in settings:
            problems.append(
                f"{key}.{arg}={value!r}: {name!r} is a {cls.__name__}, which has no setting "
                f"{arg!r}; its settings are {', '.join(settings)}. {_close(arg, settings)}"
                f"Fix: remove {key}.{arg}, or set one of those"
            )
        elif (wrong := type_problem(hints.get(arg), value)) is not None:
            problems.append(
                f"{key}.{arg}={value!r}: {cls.__name__}.{arg} is {wrong}. Fix: give {key}.{arg} "
                "a value of that type"
            )
    if problems:
        return problems
    for arg, value in args.items():
        try:  # each alone first, so the message names the key
            dataclasses.replace(fn, **{arg: value})
        except (TypeError, ValueError) as err:
            problems.append(
                f"{key}.{arg}={value!r}: {name!r} refuses it: {err}. Fix: give {key}.{arg} "
                "a value it takes"
            )
    if problems:
        return problems
    try:
        dataclasses.replace(fn, **args)
    except (TypeError, ValueError) as err:
        given = ", ".join(f"{arg}={value!r}" for arg, value in args.items())
        return [
            f"{key} ({given}): {name!r} refuses them together: {err}. Fix: change the values "
            "the message names"
        ]
    return []


def _keyword_problems(fn: Any, args: dict[str, Any], *, key: str, name: str) -> list[str]:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a C callable: nothing to check against
        return []
    takes = [
        p.name
        for p in params.values()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in CALL_KEYWORDS
    ]
    # a `**_` (or `**_kwargs`) takes any keyword but drops it, as the built-ins do
    open_ended = any(
        p.kind is p.VAR_KEYWORD and not p.name.startswith("_") for p in params.values()
    )
    hints = _hints(fn)
    problems = []
    for arg, value in args.items():
        if arg in CALL_KEYWORDS:
            problems.append(
                f"{key}.{arg}={value!r}: {arg!r} is a keyword the scorer passes on every call "
                f"({', '.join(CALL_KEYWORDS)}), so it cannot be an arg. Fix: remove "
                f"{key}.{arg}, or give the function's parameter another name"
            )
        elif arg not in takes and not open_ended:
            allowed = ", ".join(takes) or "none besides the call's own; **_ drops others"
            problems.append(
                f"{key}.{arg}={value!r}: {name!r} takes no keyword {arg!r} (its keywords: "
                f"{allowed}). {_close(arg, takes)}Fix: remove {key}.{arg}, or add the "
                "parameter (a keyword-only one: `*, " + f"{arg}=...`) to the function"
            )
        elif (wrong := type_problem(hints.get(arg), value)) is not None:
            problems.append(
                f"{key}.{arg}={value!r}: {name!r} annotates {arg} as {wrong}. Fix: give "
                f"{key}.{arg} a value of that type"
            )
    return problems


def _close(arg: str, names: list[str]) -> str:
    close = difflib.get_close_matches(arg, names, n=1)
    return f"Did you mean {close[0]!r}? " if close else ""


def _hints(obj: object) -> dict[str, Any]:
    """The evaluated annotations of a function, a class, or a callable object's ``__call__``."""
    target = obj if inspect.isroutine(obj) or isinstance(obj, type) else type(obj).__call__
    try:
        return typing.get_type_hints(target)
    except Exception:  # an annotation that does not evaluate: the values go unchecked
        return {}


def type_problem(annotation: Any, value: object) -> str | None:
    """``annotation`` with pydantic's reason when ``value`` does not fit it (strict: "3" is
    no int, 3 is a float), else None; no annotation, or one pydantic cannot check: None."""
    if annotation is None or annotation is Any:
        return None
    from pydantic import TypeAdapter, ValidationError

    try:
        TypeAdapter(annotation).validate_python(value, strict=True)
    except ValidationError as err:
        return f"{inspect.formatannotation(annotation)} ({err.errors()[0]['msg']})"
    except Exception:  # an annotation pydantic cannot build a validator for: unchecked
        return None
    return None
