"""The model's text as an OpenAI assistant message: tool calls parsed, checked, or refused.

::

    completion text ──► parse_tool_calls(fmt="qwen")   <tool_call>{"name", "arguments"}</tool_call>
        │ no call block ───────────────────────────────► content=text, finish_reason "stop"
        │ every block well formed, a listed tool, arguments that fit its JSON schema
        │     ──► tool_calls=[{id, type: function, function: {name, arguments: JSON}}],
        │         content = the text outside the blocks (or null), finish_reason "tool_calls"
        │ any block malformed, unknown or mistyped
        ▼     ──► content=text (the blocks as written), finish_reason "stop", counted as an error

All or nothing: one bad block in a turn returns the whole turn as text, so an agent never
runs half of what the model asked for. ``check_schema`` covers the JSON Schema an OpenAI
tool's ``parameters`` use: ``type`` (a name or a list), ``enum``, ``const``, ``required``,
``properties``, ``additionalProperties: false``, ``items``, ``anyOf``/``oneOf``; other
keywords are not checked.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any

from grouprl.tools.calls import parse_tool_calls
from grouprl.tools.spec import Tool, ToolSet

_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


@dataclass
class AssistantReply:
    """What one model turn becomes in the response, and what it counts."""

    content: str | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    calls_found: int = 0
    """Call blocks in the text (well formed or not)."""
    errors: list[str] = field(default_factory=list)
    """Why the calls were refused (one message per bad block)."""

    def message(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = self.tool_calls
        return out


def request_tools(tools: Any) -> ToolSet:
    """The request's ``tools`` (OpenAI function tools) as a ToolSet to parse calls against.
    Raises ValueError with the problem for a list that is not OpenAI-shaped."""
    if not isinstance(tools, list):
        raise ValueError(f"tools must be a list of function tools, got {type(tools).__name__}")
    found: list[Tool] = []
    for i, item in enumerate(tools):
        fn = item.get("function") if isinstance(item, dict) else None
        name = fn.get("name") if isinstance(fn, dict) else None
        if item.get("type", "function") != "function" or not isinstance(name, str) or not name:
            raise ValueError(
                f"tools[{i}] must be {{'type': 'function', 'function': {{'name': ..., "
                "'parameters': {...}}}"
            )
        found.append(Tool(name=name, fn=_not_run, schema={"type": "function", "function": fn}))
    return ToolSet(found)


def _not_run(**_: Any) -> None:  # the agent runs its tools; the gateway only parses calls
    raise AssertionError("the gateway never runs an agent's tools")


def assistant_reply(text: str, *, tools: ToolSet | None) -> AssistantReply:
    """``text`` as an assistant message, its ``qwen``-format tool calls parsed when the
    request listed ``tools`` (``None``: no tools, or ``tool_choice: none``)."""
    if not tools:
        return AssistantReply(content=text)
    parsed = parse_tool_calls(text, tools=tools, fmt="qwen")
    if not parsed:
        return AssistantReply(content=text)
    errors = [p.error for p in parsed if p.error is not None]
    calls = []
    for p in parsed:
        if p.call is None:
            continue
        schema = tools[p.call.name].schema["function"].get("parameters") or {}
        problem = check_schema(p.call.arguments, schema, where="arguments")
        if problem:
            errors.append(f"tool {p.call.name!r}: {problem}")
            continue
        calls.append(
            {
                "id": f"call_{secrets.token_hex(12)}",
                "type": "function",
                "function": {"name": p.call.name, "arguments": json.dumps(p.call.arguments)},
            }
        )
    if errors:
        return AssistantReply(content=text, calls_found=len(parsed), errors=errors)
    outside = text
    for p in parsed:
        outside = outside.replace(p.raw, "", 1)
    return AssistantReply(
        content=outside.strip() or None, tool_calls=calls, calls_found=len(parsed)
    )


def check_schema(value: Any, schema: Any, *, where: str) -> str | None:
    """Why ``value`` does not fit the JSON ``schema`` (the first problem), or None."""
    if not isinstance(schema, dict):
        return None
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            if all(check_schema(value, option, where=where) for option in options):
                return f"{where}={_clip(value)} fits none of its {key} schemas"
    kinds = schema.get("type")
    if kinds is not None:
        kinds = [kinds] if isinstance(kinds, str) else list(kinds)
        if schema.get("nullable"):
            kinds.append("null")
        if not any(_is_type(value, kind) for kind in kinds):
            return f"{where} expects {' or '.join(kinds)}, got {_clip(value)}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{where} expects one of {schema['enum']}, got {_clip(value)}"
    if "const" in schema and value != schema["const"]:
        return f"{where} expects {schema['const']!r}, got {_clip(value)}"
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        missing = [name for name in schema.get("required") or [] if name not in value]
        if missing:
            return f"{where} is missing required {', '.join(map(repr, missing))}"
        if schema.get("additionalProperties") is False:
            extra = [name for name in value if name not in properties]
            if extra:
                return f"{where} has unexpected {', '.join(map(repr, extra))}"
        for name, item in value.items():
            if name in properties:
                problem = check_schema(item, properties[name], where=f"{where}.{name}")
                if problem:
                    return problem
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            problem = check_schema(item, schema["items"], where=f"{where}[{i}]")
            if problem:
                return problem
    return None


def _is_type(value: Any, kind: str) -> bool:
    if kind not in _TYPES:
        return True  # not a JSON Schema type name: not checked
    if isinstance(value, bool) and kind != "boolean":
        return False
    if kind == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _TYPES[kind])


def _clip(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."
