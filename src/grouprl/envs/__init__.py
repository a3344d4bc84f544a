"""Environments: the episode loop's side of a rollout (docs/environments.md).

The public records and helpers for writing your own::

    from grouprl.envs import Step, Toolbox

    class Calculator:                         # env.name: calculator.py:Calculator
        def __init__(self, *, ctx): ...       # cls(**env.args[, ctx=EnvContext])
        def episode(self, row): ...           # -> an object with start() and step(text)
"""

from grouprl.config.env_keys import STOP_REASONS, StopReason
from grouprl.envs.base import EnvContext, Environment, Episode, Message, Step
from grouprl.tools.calls import ToolCall
from grouprl.tools.runner import ToolResult
from grouprl.tools.spec import Tool, ToolSet
from grouprl.tools.toolbox import Toolbox, ToolTurn

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
