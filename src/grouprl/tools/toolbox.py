"""Tools for your own environment in one object: schemas, parsing, safe calls, messages.

::

    box = Toolbox([add, multiply], fmt="xml", timeout_s=5)
    box.template_kwargs        -> {"tools": [...]} for fmt="qwen" (the template lists them)
    turn = box.run(model_text) -> ToolTurn(calls, results, messages, info)
    Step(messages=turn.messages, info=turn.info)        the tool replies, and their metrics

A malformed call, an unknown tool, arguments that do not fit the schema, a raising or a
hanging tool each come back as an ``Error: ...`` tool message and count in
``info["tool_errors"]``; nothing the model writes raises (``calls``, ``runner``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from grouprl.tools.calls import ToolCall, parse_tool_calls
from grouprl.tools.runner import ToolResult, ToolRunner, tool_message
from grouprl.tools.spec import Tool, ToolSet


@dataclass(frozen=True)
class ToolTurn:
    """The tool calls of one model turn and what they returned, in the order written."""

    calls: list[ToolCall | None]
    """Each call block found; None for one that could not be parsed."""
    results: list[ToolResult]
    messages: list[dict[str, Any]] = field(default_factory=list)
    """One ``tool`` message per call (errors read ``Error: ...``), for ``Step.messages``."""

    @property
    def errors(self) -> int:
        return sum(r.error is not None for r in self.results)

    @property
    def info(self) -> dict[str, int]:
        """``{"tool_calls": n, "tool_errors": e}``: ``Step.info``, which metrics add up."""
        return {"tool_calls": len(self.results), "tool_errors": self.errors}

    def __bool__(self) -> bool:
        """Whether the turn made any call (well-formed or not)."""
        return bool(self.results)


class Toolbox:
    """The tools an environment offers: typed, documented Python functions (``spec.py``
    turns their signatures and docstrings into JSON schemas).

    ``fmt``: how the model writes calls, ``xml`` (``<add><a>1</a><b>2</b></add>``; explain
    it in your system prompt) or ``qwen`` (``<tool_call>{json}</tool_call>``, which chat
    templates with tool support explain from ``template_kwargs``). Each call runs on a
    thread with ``timeout_s``; results are cut to ``max_chars``.
    """

    def __init__(
        self,
        tools: Iterable[Callable[..., Any] | Tool],
        *,
        fmt: str = "xml",
        timeout_s: float = 10.0,
        max_chars: int = 800,
    ) -> None:
        self.tools = ToolSet(tools)
        parse_tool_calls("", tools=self.tools, fmt=fmt)  # an unknown format raises here
        if not timeout_s > 0:
            raise ValueError(f"timeout_s={timeout_s} must be positive")
        self.fmt, self.timeout_s = fmt, timeout_s
        self.runner = ToolRunner(self.tools, max_chars=max_chars)

    @property
    def template_kwargs(self) -> dict[str, Any]:
        """For the environment's ``template_kwargs``: the schemas when the chat template
        formats the calls (``qwen``); nothing for ``xml``."""
        return {"tools": self.tools.schemas()} if self.fmt == "qwen" else {}

    def run(self, model_text: str) -> ToolTurn:
        """Every call in ``model_text``, run in order; an empty ``ToolTurn`` when none."""
        parsed = parse_tool_calls(model_text, tools=self.tools, fmt=self.fmt)
        results = [self.runner.run(p, timeout_s=self.timeout_s) for p in parsed]
        return ToolTurn(
            calls=[p.call for p in parsed],
            results=results,
            messages=[tool_message(r) for r in results],
        )
