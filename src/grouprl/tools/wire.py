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
runs half of what the model asked for. Arguments are checked by ``jsonschema`` against the
tool's ``parameters`` (``arguments.argument_problems``: Draft 2020-12, and OpenAPI's
``nullable``); a request whose ``parameters`` are not a JSON Schema is refused.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any

from grouprl.tools.arguments import argument_problems, check_parameters
from grouprl.tools.calls import parse_tool_calls
from grouprl.tools.spec import Tool, ToolSet


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


def request_tools(tools: object) -> ToolSet:
    """The request's ``tools`` (OpenAI function tools) as a ToolSet to parse calls against.
    Raises ValueError with the problem for a list that is not OpenAI-shaped, or whose
    ``parameters`` are not a JSON Schema."""
    if not isinstance(tools, list):
        raise ValueError(f"tools must be a list of function tools, got {type(tools).__name__}")
    found: list[Tool] = []
    for i, item in enumerate(tools):
        fn = item.get("function") if isinstance(item, dict) else None
        name = fn.get("name") if isinstance(fn, dict) else None
        if (
            not isinstance(fn, dict)  # item is a dict too
            or not isinstance(name, str)
            or not name
            or item.get("type", "function") != "function"
        ):
            raise ValueError(
                f"tools[{i}] must be {{'type': 'function', 'function': {{'name': ..., "
                "'parameters': {...}}}"
            )
        if fn.get("parameters") is not None:
            check_parameters(fn["parameters"], where=f"tools[{i}].function.parameters")
        found.append(Tool(name=name, fn=_not_run, schema={"type": "function", "function": fn}))
    return ToolSet(found)


def _not_run(**_: object) -> None:  # the agent runs its tools; the gateway only parses calls
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
        problems = argument_problems(p.call.arguments, schema, strict_integers=False)
        if problems:
            errors.append(f"tool {p.call.name!r}: " + "; ".join(problems))
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
