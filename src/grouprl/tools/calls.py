"""Parsing the model's tool calls.

Nothing the model writes makes parsing raise: malformed calls are ``ParsedCall.error``
entries. Their arguments are checked against the tools' schemas when they run
(``arguments.check_arguments``, in ``runner``) or reach an agent (``wire``).

Call formats (``CALL_FORMATS``)::

    qwen  <tool_call>
          {"name": "search", "arguments": {"query": "capital of France", "k": 2}}
          </tool_call>
    xml   <search><query>capital of France</query><k>2</k></search>
          <search>capital of France</search>      (bare body: see _bare_argument)

A block must be closed to count: if generation stops on ``</tool_call>``, keep the stop
string in the output (vLLM ``include_stop_str_in_output=True``). Decode with special tokens
kept when the format's tags are special tokens. XML text is taken verbatim (no ``&lt;``
decoding) and argument values are stripped of surrounding whitespace.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from grouprl.tools.arguments import clip, json_type
from grouprl.tools.spec import Tool, ToolSet


@dataclass(frozen=True)
class ToolCall:
    """One call the model made: the tool's name, its arguments (JSON values), and an id
    (``call_0``, ``call_1``, ... in the order of the turn) that its tool message carries."""

    name: str
    arguments: dict[str, Any]
    id: str = field(default="", compare=False)


@dataclass(frozen=True)
class ParsedCall:
    """One call block found in a model turn: a well-formed ``call`` or an ``error`` for it."""

    raw: str
    """The block as the model wrote it (an unclosed block runs to the end of the text)."""
    call: ToolCall | None = None
    error: str | None = None

    def __post_init__(self) -> None:
        assert (self.call is None) != (self.error is None), "exactly one of call, error"


_QWEN_OPEN, _QWEN_CLOSE = "<tool_call>", "</tool_call>"
_QWEN_SHAPE = '<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>'


def _parse_qwen(text: str, tools: ToolSet) -> list[ParsedCall]:
    found: list[ParsedCall] = []
    pos = 0
    while (start := text.find(_QWEN_OPEN, pos)) != -1:
        end = text.find(_QWEN_CLOSE, start + len(_QWEN_OPEN))
        if end == -1:  # no later block can be closed either
            error = f"unclosed {_QWEN_OPEN}: no {_QWEN_CLOSE} after it"
            found.append(ParsedCall(raw=text[start:], error=error))
            break
        pos = end + len(_QWEN_CLOSE)
        found.append(_qwen_call(text[start + len(_QWEN_OPEN) : end], text[start:pos], tools))
    return found


def _qwen_call(body: str, raw: str, tools: ToolSet) -> ParsedCall:
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError) as err:
        error = f"tool call is not valid JSON ({err}); write {_QWEN_SHAPE}"
        return ParsedCall(raw=raw, error=error)
    if not isinstance(obj, dict):
        error = f"tool call must be a JSON object, got {json_type(obj)}; write {_QWEN_SHAPE}"
        return ParsedCall(raw=raw, error=error)
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return ParsedCall(raw=raw, error=f'tool call has no "name" string; write {_QWEN_SHAPE}')
    if name not in tools:
        return ParsedCall(raw=raw, error=_unknown_tool(name, tools))
    arguments = obj.get("arguments", {})  # absent: no arguments (the check names missing ones)
    if not isinstance(arguments, dict):
        error = f'"arguments" of tool {name!r} must be a JSON object, got {json_type(arguments)}'
        return ParsedCall(raw=raw, error=error)
    return ParsedCall(raw=raw, call=ToolCall(name, arguments))


_OPEN_TAG = re.compile(r"<([A-Za-z_][\w.-]*)>")
_SPACE = re.compile(r"\s*")


def _after_space(text: str, pos: int) -> int:
    """The first position from ``pos`` that is not whitespace (or the end)."""
    match = _SPACE.match(text, pos)
    assert match is not None  # \s* matches everywhere
    return match.end()


def _parse_xml(text: str, tools: ToolSet) -> list[ParsedCall]:
    found: list[ParsedCall] = []
    unclosed: set[str] = set()  # tools with no closing tag left in the text: do not search again
    pos = 0
    while tag := _OPEN_TAG.search(text, pos):
        pos = tag.end()
        name = tag[1]
        if name not in tools:  # prose, markup, or another tool's argument tags
            continue
        close = f"</{name}>"
        end = -1 if name in unclosed else text.find(close, tag.end())
        if end == -1:
            unclosed.add(name)
            error = f"unclosed <{name}>: no {close} after it"
            found.append(ParsedCall(raw=text[tag.start() :], error=error))
            continue
        pos = end + len(close)
        found.append(_xml_call(tools[name], text[tag.end() : end], text[tag.start() : pos]))
    return found


def _xml_call(tool: Tool, body: str, raw: str) -> ParsedCall:
    body = body.strip()
    first = _OPEN_TAG.match(body)
    bare = _bare_argument(tool)
    if bare is not None and not (first and first[1] in tool.parameters):
        return ParsedCall(raw=raw, call=ToolCall(tool.name, {bare: body}))
    arguments: dict[str, Any] = {}
    pos = _after_space(body, 0)
    while pos < len(body):
        tag = _OPEN_TAG.match(body, pos)
        if tag is None:
            outside = clip(body[pos:])
            error = f"<{tool.name}> takes arguments as tags <arg>value</arg>; found {outside}"
            return ParsedCall(raw=raw, error=error)
        arg, close = tag[1], f"</{tag[1]}>"
        end = body.find(close, tag.end())
        if end == -1:
            return ParsedCall(raw=raw, error=f"unclosed <{arg}> inside <{tool.name}>")
        if arg in arguments:
            return ParsedCall(raw=raw, error=f"argument <{arg}> given twice in <{tool.name}>")
        arguments[arg] = _from_text(body[tag.end() : end].strip(), tool.parameters.get(arg))
        pos = _after_space(body, end + len(close))
    return ParsedCall(raw=raw, call=ToolCall(tool.name, arguments))


def _bare_argument(tool: Tool) -> str | None:
    """The argument a bare ``<tool>text</tool>`` body fills, if any.

    The tool's one required argument, or its one argument when none is required, provided
    it is a string: ``search(query: str, k: int = 3)`` takes ``<search>cats</search>``. A body
    that opens with one of the tool's argument tags is read as argument tags instead.
    """
    candidates = tool.required or list(tool.parameters)
    if len(candidates) == 1 and tool.parameters[candidates[0]]["type"] == "string":
        return candidates[0]
    return None


_INTEGER_TEXT = re.compile(r"[+-]?[0-9]+")
_NUMBER_TEXT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _from_text(text: str, prop: dict[str, Any] | None) -> Any:
    """An XML argument's text as its schema type where the text reads as one, else the text.

    Text that does not read as the type is passed on, and the argument check names the
    mismatch, so XML and JSON calls get the same errors.
    """
    if prop is None:
        return text
    kind = prop["type"]
    try:
        if prop.get("nullable") and kind != "string" and text in ("", "null"):
            return None
        if kind == "integer" and _INTEGER_TEXT.fullmatch(text):
            return int(text)
        if kind == "number" and _NUMBER_TEXT.fullmatch(text):
            return float(text)
        if kind == "boolean" and text.lower() in ("true", "false"):
            return text.lower() == "true"
        if kind == "array" and isinstance(value := json.loads(text), list):
            return value
    except (ValueError, RecursionError, OverflowError):  # e.g. an int past 4300 digits
        pass
    return text


CALL_FORMATS: dict[str, Callable[[str, ToolSet], list[ParsedCall]]] = {
    "qwen": _parse_qwen,
    "xml": _parse_xml,
}


def parse_tool_calls(text: str, *, tools: ToolSet, fmt: str) -> list[ParsedCall]:
    """The tool calls in one model turn, in order; text outside call blocks is ignored.

    Never raises for any ``text``; an unknown ``fmt`` (a configuration error) raises ValueError.
    """
    if fmt not in CALL_FORMATS:
        choices = ", ".join(CALL_FORMATS)
        raise ValueError(f"unknown tool-call format {fmt!r}; choose one of: {choices}")
    found = CALL_FORMATS[fmt](text, tools)
    return [
        p if p.call is None else replace(p, call=replace(p.call, id=f"call_{i}"))
        for i, p in enumerate(found)
    ]


def _unknown_tool(name: str, tools: ToolSet) -> str:
    return f"unknown tool {name!r}; available: {', '.join(tools) or '(none)'}"
