"""Environments: the episode loop's side of a rollout (docs/environments.md).

The public records and helpers for writing your own::

    from grouprl.envs import Step, Toolbox

    class Calculator:                         # env.name: calculator.py:Calculator
        def __init__(self, *, ctx): ...       # cls(**env.args[, ctx=EnvContext])
        def episode(self, row): ...           # -> an object with start() and step(text)
"""

from grouprl.envs.base import (
    STOP_REASONS,
    EnvContext,
    Environment,
    Episode,
    Message,
    Step,
    StopReason,
)
from grouprl.envs.tool_calls import ToolCall
from grouprl.envs.tool_runner import ToolResult
from grouprl.envs.toolbox import Toolbox, ToolTurn
from grouprl.envs.tools import Tool, ToolSet

__all__ = [
    "STOP_REASONS",
    "EnvContext",
    "Environment",
    "Episode",
    "Message",
    "Step",
    "StopReason",
    "Tool",
    "ToolCall",
    "ToolResult",
    "ToolSet",
    "ToolTurn",
    "Toolbox",
]
