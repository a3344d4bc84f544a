"""A config field's type, constraints and default as a person writes them, for the
configuration reference (``config/reference.py``, docs/config.md) and for the errors of a
value set from Python. Imports only pydantic.

    int + Field(ge=1)                 ->  integer >= 1
    Literal["vllm", "hf"]             ->  one of vllm, hf
    float | None + Field(gt=0)        ->  number > 0, or null
    str | list[str]                   ->  text, or list of text
"""

from __future__ import annotations

import difflib
import types
import typing
from typing import Any, Literal

import annotated_types
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from grouprl.config.errors import show

_NAMES = {int: "integer", float: "number", bool: "true/false", str: "text", type(None): "null"}
_BOUNDS = (
    (annotated_types.Ge, "ge", ">="),
    (annotated_types.Gt, "gt", ">"),
    (annotated_types.Le, "le", "<="),
    (annotated_types.Lt, "lt", "<"),
)


def type_text(annotation: object) -> str:
    """``annotation`` in words: ``integer``, ``one of a, b``, ``list of text``, ``section``."""
    if annotation in _NAMES:
        return _NAMES[annotation]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "section"
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Literal:
        return "one of " + ", ".join(str(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        inner = [type_text(a) for a in args if a is not type(None)]
        text = " or ".join(inner)
        return f"{text}, or null" if type(None) in args else text
    if origin is list:
        inner = type_text(args[0])
        return "list of sections" if inner == "section" else f"list of {inner}"
    if origin is tuple:
        return "[" + ", ".join(type_text(a) for a in args) + "]"
    return getattr(annotation, "__name__", str(annotation))


def allowed_text(field: FieldInfo) -> str:
    """What ``field`` accepts: its type with its bounds (``integer >= 1, or null``)."""
    text = type_text(field.annotation)
    bounds = ", ".join(  # ``>= 1``, ``> 0, <= 1``
        f"{sign} {getattr(item, attr)}"
        for item in field.metadata
        for kind, attr, sign in _BOUNDS
        if isinstance(item, kind)
    )
    if not bounds:
        return text
    head, null, _ = text.partition(", or null")
    return f"{head} {bounds}" + (", or null" if null else "")


def yaml_text(value: object) -> str:
    """One value as a recipe writes it: ``null``, ``true``, ``8``, ``builtin:arith``, ``[a, b]``."""
    if value is None or isinstance(value, bool):
        return show(value)
    if isinstance(value, BaseModel):
        return yaml_text(value.model_dump())
    if isinstance(value, list | tuple):
        return "[" + ", ".join(yaml_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {yaml_text(v)}" for k, v in value.items()) + "}"
    return str(value)


def reason_text(problem: typing.Mapping[str, Any]) -> str:
    """pydantic's message for one problem in the project's words (no ``Input should be``,
    no ``Value error,`` prefix; pydantic's URL is never part of it)."""
    message = str(problem["msg"]).removeprefix("Value error, ")
    return message.replace("Input should be", "should be")


def assignment_message(err: ValidationError, *, owner: type[BaseModel], path: str | None) -> str:
    """The ``ConfigError`` text for a value set from Python that the schema refuses:
    ``cfg.rollout.n = 0: should be greater than or equal to 1 (allowed: integer >= 1)``,
    then the fix. ``path`` is the section's place in the run config (``rollout``; empty
    for the run config itself; None for a section made on its own, named by its class)."""
    lines = []
    for problem in err.errors():
        name = ".".join(str(part) for part in problem["loc"])
        if path is None:
            where = f"{owner.__name__}.{name}"
        else:
            where = "cfg." + (f"{path}.{name}" if path else name)
        if problem["type"] == "no_such_attribute":
            close = difflib.get_close_matches(name, list(owner.model_fields), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            keys = ", ".join(owner.model_fields)
            lines.append(f"{where}: there is no such key.{hint} The keys here: {keys}")
            continue
        field = owner.model_fields.get(str(problem["loc"][0])) if problem["loc"] else None
        allowed = f" (allowed: {allowed_text(field)})" if field is not None else ""
        lines.append(f"{where} = {show(problem['input'])}: {reason_text(problem)}{allowed}")
    fix = (
        "Fix: assign an allowed value (docs/config.md lists every key), or load the config "
        'with the override, e.g. grouprl.load_config(recipe, ["KEY=VALUE"]).'
    )
    return "\n".join([*lines, fix])
