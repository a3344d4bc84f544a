"""Running an agent's tool calls with the treatment grouprl's environments give theirs.

::

    tools = AgentTools([search, add], timeout_s=10)
    reply = client.chat.completions.create(..., tools=tools.schemas).choices[0].message
    messages += [reply, *tools.run(reply)]     # one tool message per call, in order

Each call's arguments are checked against its tool's schema; the tool runs on a daemon
thread with a timeout (``runner.ToolRunner``); arguments that are not JSON, an
unknown tool, arguments that do not fit, an exception or a hang become an ``Error: ...``
tool message the model reads next turn, never an exception in the agent. A tool that
hangs past its timeout leaves its thread running; the agent's deadline
(``env.agent.timeout_s``) bounds the whole episode.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any

from grouprl.tools.calls import ToolCall
from grouprl.tools.runner import ToolResult, ToolRunner
from grouprl.tools.spec import ToolSet


class AgentTools:
    """Plain typed, documented functions as OpenAI tools (``schemas``) and their runner."""

    def __init__(
        self,
        functions: Iterable[Callable[..., Any]],
        *,
        timeout_s: float = 10.0,
        max_chars: int = 4000,
    ) -> None:
        self.toolset = ToolSet(functions)
        self.runner = ToolRunner(self.toolset, max_chars=max_chars)
        self.timeout_s = timeout_s
        self.calls = self.errors = 0

    @property
    def schemas(self) -> list[dict[str, Any]]:
        """The ``tools=`` list of a chat completion request."""
        return self.toolset.schemas()

    def run(self, message: Any) -> list[dict[str, Any]]:
        """A ``tool`` message for each tool call of ``message`` (the assistant message the
        client returned, or its dict), with its ``tool_call_id``; [] when it has none."""
        if not isinstance(message, dict):
            message = message.model_dump() if hasattr(message, "model_dump") else vars(message)
        out = []
        for call in message.get("tool_calls") or []:
            fn = call.get("function") or {}
            name, arguments = fn.get("name") or "", fn.get("arguments") or "{}"
            try:
                arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
            except ValueError as err:
                result = ToolResult(name, "", f"arguments are not JSON ({err})", 0.0)
            else:  # "null" too: it is JSON, not an object
                if isinstance(arguments, dict):
                    result = self.runner.call(ToolCall(name, arguments), timeout_s=self.timeout_s)
                else:
                    result = ToolResult(name, "", "arguments must be a JSON object", 0.0)
            self.calls += 1
            self.errors += result.error is not None
            content = result.content if result.error is None else f"Error: {result.error}"
            out.append({"role": "tool", "tool_call_id": call.get("id"), "content": content})
        return out


def report_reward(base_url: str, reward: float, *, timeout_s: float = 10.0) -> None:
    """Reports the episode's reward to the gateway (``POST {base_url}/reward``); the episode
    scores it when ``solve`` returns None. ``base_url`` is the one ``solve`` received."""
    body = json.dumps({"reward": float(reward)}).encode()
    request = urllib.request.Request(
        f"{base_url.rstrip('/')}/reward",
        data=body,
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        response.read()
