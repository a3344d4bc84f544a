"""For agents that run their own loop against grouprl's gateway (``env.agent``,
docs/gateway.md): run their tool calls as grouprl's environments do, report a reward.

    from grouprl.agents import AgentTools, report_reward

Imports no torch: agents run in worker processes.
"""

from grouprl.tools.agent import AgentTools, report_reward

__all__ = ["AgentTools", "report_reward"]
