"""A tool call's arguments checked against its tool's JSON Schema, by ``jsonschema``, for
both call paths: grouprl's environments (``ToolRunner`` calls ``check_arguments``) and the
gateway (``wire.assistant_reply`` calls ``argument_problems``).

::

    arguments (JSON values) + the tool's "parameters" schema
        │ jsonschema, Draft 2020-12, with OpenAPI's "nullable": true (null fits too)
        ▼ every problem, one per argument, in words the model can act on:
    missing required argument 'b' (number); unexpected argument(s) 'c'; it takes: a, b;
    argument 'a' expects integer, got string '1'

"integer" reads two ways. The gateway's tools are JSON Schema, where ``3.0`` is an integer.
An environment's tools are Python functions typed ``int`` (``spec.tool_schema``), so
``check_arguments`` refuses ``3.0`` (``strict_integers``), refuses arguments the function
does not take, and passes ints for ``float`` arguments as floats.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from jsonschema import Draft202012Validator, ValidationError, validators
from jsonschema.exceptions import SchemaError
from referencing.exceptions import Unresolvable

from grouprl.tools.spec import Tool


class ToolArgumentError(ValueError):
    """A call's arguments do not fit its tool's schema; the message is shown to the model."""


def _nullable(keyword: str) -> Callable[..., Iterator[ValidationError]]:
    """Draft 2020-12's ``keyword`` check, passing null where the schema is ``nullable``."""
    check = Draft202012Validator.VALIDATORS[keyword]

    def nullable_check(validator, value, instance, schema) -> Iterator[ValidationError]:
        if instance is None and schema.get("nullable") is True:
            return
        yield from check(validator, value, instance, schema) or ()

    return nullable_check


_NULLABLE = {"type": _nullable("type"), "enum": _nullable("enum")}
_JSON = validators.extend(Draft202012Validator, _NULLABLE)
_PYTHON = validators.extend(
    Draft202012Validator,
    _NULLABLE,
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _, value: isinstance(value, int) and not isinstance(value, bool)
    ),
)


def check_parameters(schema: Mapping[str, Any] | bool, *, where: str) -> None:
    """Raises ValueError, naming ``where``, when ``schema`` is not a JSON Schema."""
    try:
        _JSON.check_schema(schema)
    except SchemaError as err:
        path = "".join(f"[{p!r}]" for p in err.path)
        raise ValueError(f"{where}{path} is not a valid JSON Schema: {err.message}") from None


MAX_DEPTH = 64
"""Arguments nested deeper (lists and objects) are refused unchecked."""


def _too_deep(value: object) -> bool:
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            return True
        if isinstance(item, dict | list):
            children = item.values() if isinstance(item, dict) else item
            stack += [(child, depth + 1) for child in children]
    return False


def argument_problems(
    arguments: Mapping[str, Any], parameters: Mapping[str, Any], *, strict_integers: bool
) -> list[str]:
    """Why ``arguments`` do not fit the ``parameters`` schema: at most one problem per
    argument ([] when they fit). Missing arguments come first, then unexpected ones, then
    the rest in the order of ``arguments``."""
    if _too_deep(arguments):  # jsonschema recurses (and its Rust maps panic on RecursionError)
        return [f"arguments are nested more than {MAX_DEPTH} levels deep"]
    validator = (_PYTHON if strict_integers else _JSON)(parameters)
    try:
        errors = list(validator.iter_errors(dict(arguments)))
    except Unresolvable as err:
        return [f"the tool's schema cannot be checked: {err}"]
    order: dict[str | int, int] = {name: i for i, name in enumerate(arguments)}

    def rank(error: ValidationError) -> int:
        if error.path:
            return 2 + order.get(error.path[0], len(order))
        return 0 if error.validator == "required" else 1

    problems, seen = [], set()
    for error in sorted(errors, key=rank):
        key = ("argument", error.path[0]) if error.path else ("keyword", error.validator)
        if key not in seen:  # the first problem of each argument (and of each root keyword)
            seen.add(key)
            problems += _describe(error)
    return problems


def check_arguments(tool: Tool, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """``arguments`` checked against ``tool``'s schema, with ints given for numbers as floats.

    No other coercion: ``"3"`` for an integer, ``3.0`` for an integer and ``true`` for a
    number are errors. Raises ``ToolArgumentError`` naming the tool and every problem found.
    """
    parameters = {**tool.schema["function"]["parameters"], "additionalProperties": False}
    problems = argument_problems(arguments, parameters, strict_integers=True)
    checked = {}
    for name, value in arguments.items():
        if name not in tool.parameters:  # a problem above
            continue
        try:  # JSON has one number type: 2 means 2.0
            checked[name] = _floats(value, tool.parameters[name])
        except OverflowError:
            problems.append(f"argument {name!r} expects number, got an integer too large for one")
    if problems:
        raise ToolArgumentError(f"tool {tool.name!r}: " + "; ".join(problems))
    return checked


def _floats(value: object, prop: dict[str, Any]) -> object:
    if prop["type"] == "number" and type(value) is int:
        return float(value)
    if prop["type"] == "array" and isinstance(value, list):
        return [_floats(item, prop["items"]) for item in value]
    return value


def _describe(error: ValidationError) -> list[str]:
    where = _where(error.path)
    # iter_errors fills these in; jsonschema annotates them as possibly unset (and a schema
    # as possibly a bool schema, which has no keywords to report)
    instance: Any = error.instance
    wanted: Any = error.validator_value
    schema: Mapping[str, Any] = error.schema if isinstance(error.schema, Mapping) else {}
    properties = schema.get("properties") or {}
    keyword = error.validator
    if keyword == "required":
        missing = [name for name in wanted if name not in instance]
        lead = "missing required argument" if not error.path else f"{where} is missing required"
        return [
            f"{lead} {name!r} ({_type_label(properties[name])})"
            if name in properties
            else f"{lead} {name!r}"
            for name in missing
        ]
    if keyword == "additionalProperties" and wanted is False:
        patterns = schema.get("patternProperties") or {}
        extra = [
            name
            for name in instance
            if name not in properties and not any(re.search(p, name) for p in patterns)
        ]
        takes = ", ".join(properties) or "no arguments"
        lead = "unexpected argument(s)" if not error.path else f"{where} has unexpected"
        return [f"{lead} {', '.join(map(repr, extra))}; it takes: {takes}"]
    if keyword == "type":
        got = "null" if instance is None else f"{json_type(instance)} {clip(instance)}"
        return [f"{where} expects {_type_label(schema)}, got {got}"]
    if keyword == "enum":
        return [f"{where} expects {_type_label(schema)}, got {clip(instance)}"]
    return [f"{where}: {clip(error.message, limit=200, as_text=True)}"]  # jsonschema's words


def _where(path: Sequence[str | int]) -> str:
    if not path:
        return "arguments"
    where = f"argument {path[0]!r}"
    for part in list(path)[1:]:
        where += f" item {part}" if isinstance(part, int) else f" key {part!r}"
    return where


def _type_label(schema: object) -> str:
    """What a schema asks for, in a few words: ``integer``, ``array of string or null``,
    ``one of "en", "fr"``."""
    if not isinstance(schema, dict):
        return "any value" if schema is not False else "nothing"
    kinds = schema.get("type", [])
    kinds = [kinds] if isinstance(kinds, str) else list(kinds)
    nullable = schema.get("nullable") is True or "null" in kinds
    kinds = [kind for kind in kinds if kind != "null"]
    if isinstance(schema.get("enum"), list):
        nullable = nullable or None in schema["enum"]
        values = [v for v in schema["enum"] if v is not None]
        label = "one of " + ", ".join(json.dumps(v, default=str) for v in values)
    elif kinds == ["array"] and isinstance(schema.get("items"), dict):
        label = f"array of {_type_label(schema['items'])}"
    elif kinds:
        label = " or ".join(map(str, kinds))
    elif nullable:
        return "null"
    else:
        label = "a value that fits its schema"
    return f"{label} or null" if nullable else label


def json_type(value: object) -> str:
    """The JSON type of a parsed JSON value (``integer`` and ``number`` apart)."""
    if value is None or isinstance(value, bool):
        return "null" if value is None else "boolean"
    for kind, name in ((int, "integer"), (float, "number"), (str, "string"), (list, "array")):
        if isinstance(value, kind):
            return name
    return "object" if isinstance(value, dict) else type(value).__name__


def clip(value: object, *, limit: int = 60, as_text: bool = False) -> str:
    """``repr(value)`` (``value`` itself, ``as_text``) cut to ``limit`` characters."""
    try:
        text = str(value) if as_text else repr(value)
    except RecursionError:
        return f"<deeply nested {type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."
