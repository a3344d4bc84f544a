"""Tools for multi-turn agents: schemas from plain, typed, documented functions.

::

    def search(query: str, k: int = 3) -> str: ...      plain, typed, documented function
        │ ToolSet([search])                              schema per tool (tool_schema)
        ▼
    tools.schemas() ──► tokenizer.apply_chat_template(messages, tools=...)
    model turn text ──► parse_tool_calls(text, tools=tools, fmt="qwen" | "xml")   calls.py
        │ [ParsedCall(call=ToolCall(name, arguments) | error="...", raw="<tool_call>...")]
        ▼
    ToolRunner(tools).run(parsed, timeout_s=...) ──► ToolResult per call          runner.py

User mistakes (a function that cannot be described by a schema, two tools with one name)
raise at startup. Nothing the model writes raises (see ``calls`` and ``runner``).
"""

from __future__ import annotations

import copy
import inspect
import re
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

SUPPORTED_TYPES = "str, int, float, bool, list[X], Literal[...], X | None (Optional[X])"
_SCALARS: dict[type, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def tool_schema(fn: Callable[..., Any]) -> dict[str, Any]:
    """The JSON schema of ``fn`` in the shape chat templates take (``apply_chat_template(tools=)``).

    ``{"type": "function", "function": {"name", "description", "parameters": {"type":
    "object", "properties": {arg: {"type", ["items" | "enum"], ["nullable"], ["description"]}},
    "required": [...]}}}``. The description is the docstring's first paragraph; argument
    descriptions come from a Google-style ``Args:`` section. An argument is required unless it
    has a default or is ``X | None`` (then ``"nullable": true``: the model may pass null).
    Raises ``TypeError`` naming the function and argument for anything else.
    """
    name = getattr(fn, "__name__", None)
    if not isinstance(name, str) or not name.isidentifier():
        raise TypeError(f"tool {fn!r} needs an identifier as its name (a def, not a lambda)")
    try:
        hints = typing.get_type_hints(fn)
        params = inspect.signature(fn).parameters.values()
    except (NameError, TypeError, ValueError) as err:
        raise TypeError(f"tool function {name!r}: cannot read its signature ({err})") from err
    description, arg_docs = _parse_docstring(inspect.getdoc(fn) or "")
    properties: dict[str, dict[str, Any]] = {}
    required: list[str] = []
    for param in params:
        where = f"tool function {name!r} argument {param.name!r}"
        if param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            kinds = "*args, **kwargs and positional-only arguments are not supported"
            raise TypeError(f"{where}: tools are called with keyword arguments only; {kinds}")
        if param.name not in hints:
            raise TypeError(f"{where} has no type annotation; use one of: {SUPPORTED_TYPES}")
        prop = _annotation_schema(hints[param.name], where)
        if param.name in arg_docs:
            prop["description"] = arg_docs[param.name]
        properties[param.name] = prop
        if param.default is param.empty and not prop.get("nullable"):
            required.append(param.name)
    parameters = {"type": "object", "properties": properties, "required": required}
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


def _annotation_schema(annotation: Any, where: str) -> dict[str, Any]:
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return {**_plain_schema(rest[0], where), "nullable": True}
    return _plain_schema(annotation, where)


def _plain_schema(annotation: Any, where: str) -> dict[str, Any]:
    if annotation in _SCALARS:
        return {"type": _SCALARS[annotation]}
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is list and len(args) == 1:
        return {"type": "array", "items": _plain_schema(args[0], where)}
    if origin is Literal:
        kinds = {_SCALARS.get(type(value)) for value in args}
        if len(kinds) == 1 and None not in kinds:
            return {"type": kinds.pop(), "enum": list(args)}
    shown = inspect.formatannotation(annotation)
    raise TypeError(f"{where}: unsupported type annotation {shown}; use one of: {SUPPORTED_TYPES}")


_SECTION = re.compile(r"(\s*)(?:Args|Arguments|Parameters):\s*\Z")
_ARG_ENTRY = re.compile(r"\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:(.*)\Z")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """(first paragraph as one line, {argument: description}) of a cleaned docstring."""
    lines = doc.splitlines()
    first: list[str] = []
    for line in lines:
        if not line.strip() or _SECTION.match(line):
            break
        first.append(line.strip())
    args: dict[str, list[str]] = {}
    header = next((i for i, line in enumerate(lines) if _SECTION.match(line)), None)
    if header is not None:
        section_indent, entry_indent, current = _indent(lines[header]), None, None
        for line in lines[header + 1 :]:
            if not line.strip():
                continue
            if _indent(line) <= section_indent:  # the next section ("Returns:") or prose
                break
            entry_indent = _indent(line) if entry_indent is None else entry_indent
            entry = _ARG_ENTRY.match(line.strip())
            if entry and _indent(line) == entry_indent:
                current = entry[1]
                args[current] = [entry[2].strip()]
            elif current is not None:
                args[current].append(line.strip())
    return " ".join(first), {k: " ".join(p for p in v if p) for k, v in args.items() if any(v)}


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


@dataclass(frozen=True)
class Tool:
    name: str
    fn: Callable[..., Any]
    schema: dict[str, Any]

    @classmethod
    def from_function(cls, fn: Callable[..., Any]) -> Tool:
        schema = tool_schema(fn)
        return cls(name=schema["function"]["name"], fn=fn, schema=schema)

    @property
    def parameters(self) -> dict[str, dict[str, Any]]:
        """Argument name -> its property schema, in signature order."""
        return self.schema["function"]["parameters"]["properties"]

    @property
    def required(self) -> list[str]:
        return self.schema["function"]["parameters"]["required"]


class ToolSet(Mapping[str, Tool]):
    """The tools an environment offers, by name; built from functions (or ``Tool``s)."""

    def __init__(self, tools: Iterable[Callable[..., Any] | Tool]) -> None:
        self._tools: dict[str, Tool] = {}
        for item in tools:
            tool = item if isinstance(item, Tool) else Tool.from_function(item)
            if tool.name in self._tools:
                raise ValueError(f"two tools are named {tool.name!r}; rename one of the functions")
            self._tools[tool.name] = tool

    def __getitem__(self, name: str) -> Tool:
        return self._tools[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    def schemas(self) -> list[dict[str, Any]]:
        """One schema per tool, for ``apply_chat_template(tools=...)`` (copies: safe to edit)."""
        return [copy.deepcopy(tool.schema) for tool in self._tools.values()]
