"""Running checked tool calls safely, and feeding their results back to the model.

::

    ToolRunner(tools).run(parsed, timeout_s=...)
        │ unknown tool / arguments that do not fit the schema ──► error result, tool not run
        │ fn(**arguments) on a daemon thread, abandoned past timeout_s
        ▼
    ToolResult(name, content, error, seconds) ──► tool_message(result) ──► next turn's prompt

Failed calls are ``ToolResult.error``, which ``tool_message`` turns into an ``Error: ...``
observation the model reads on its next turn.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from grouprl.tools.arguments import ToolArgumentError, check_arguments
from grouprl.tools.calls import ParsedCall, ToolCall, _unknown_tool
from grouprl.tools.spec import ToolSet


@dataclass(frozen=True)
class ToolResult:
    name: str
    """The tool called; "" for a call that could not be parsed."""
    content: str
    """The tool's return value as text, cut at the runner's ``max_chars``; "" on error."""
    error: str | None
    seconds: float


class _Job:
    def __init__(self, fn: Callable[..., Any], arguments: dict[str, Any]) -> None:
        self.fn, self.arguments = fn, arguments
        self.done = threading.Event()
        self.content = ""
        self.error: str | None = None

    def run(self) -> None:
        try:  # converting on this thread too, so a slow or failing __str__ is the tool's
            self.content = _as_text(self.fn(**self.arguments))
        except BaseException as err:  # SystemExit too: a tool must not end the episode
            self.error = f"ToolError: {type(err).__name__}: {err}".removesuffix(": ")
        finally:
            self.done.set()


def _as_text(value: object) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return str(value)


class ToolRunner:
    """Runs checked calls, one fresh daemon thread per call, each with its own deadline.

    Python cannot stop a thread, so a call past ``timeout_s`` is abandoned: its result is an
    error and its thread runs on until the tool returns. Each timed-out call leaks that one
    thread (forever if the tool never returns); being a daemon it never blocks interpreter
    exit. Tools that may hang on I/O should set their own timeouts too. The runner keeps no
    per-call state, so one runner serves any number of calls, from any number of threads.
    """

    def __init__(self, tools: ToolSet, *, max_chars: int = 4000) -> None:
        if max_chars < 1:
            raise ValueError(f"max_chars={max_chars} must be at least 1")
        self.tools, self.max_chars = tools, max_chars

    def run(self, parsed: ParsedCall, *, timeout_s: float) -> ToolResult:
        """``call`` for a parsed call; a parse error becomes an error result (the tool not run)."""
        if parsed.call is None:
            assert parsed.error is not None, "a ParsedCall holds a call or an error"
            return ToolResult(name="", content="", error=self._cut(parsed.error), seconds=0.0)
        return self.call(parsed.call, timeout_s=timeout_s)

    def call(self, call: ToolCall, *, timeout_s: float) -> ToolResult:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s={timeout_s} must be positive")
        start = time.perf_counter()
        tool = self.tools.get(call.name)
        if tool is None:
            return self._result(call.name, "", _unknown_tool(call.name, self.tools), start)
        try:
            arguments = check_arguments(tool, call.arguments)
        except ToolArgumentError as err:
            return self._result(call.name, "", str(err), start)
        job = _Job(tool.fn, arguments)
        threading.Thread(target=job.run, daemon=True, name=f"grouprl-tool-{tool.name}").start()
        if not job.done.wait(timeout_s):
            return self._result(call.name, "", f"timed out after {timeout_s:g}s", start)
        return self._result(call.name, job.content, job.error, start)

    def _result(self, name: str, content: str, error: str | None, start: float) -> ToolResult:
        seconds = time.perf_counter() - start
        error = None if error is None else self._cut(error)
        return ToolResult(name=name, content=self._cut(content), error=error, seconds=seconds)

    def _cut(self, text: str) -> str:
        cut = len(text) - self.max_chars
        return text if cut <= 0 else f"{text[: self.max_chars]}\n[truncated: {cut} more characters]"


def tool_message(result: ToolResult) -> dict[str, str]:
    """The chat message that feeds ``result`` back to the model; errors read as observations."""
    content = result.content if result.error is None else f"Error: {result.error}"
    return {"role": "tool", "name": result.name, "content": content}
