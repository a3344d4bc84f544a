"""Tools: what a model calls during an episode, for grouprl's environments and for
agents behind the gateway alike.

``spec`` (Tool, ToolSet: a tool and its JSON schema), ``calls`` (parsing a completion's
tool calls), ``arguments`` (checking a call's arguments against its schema, with
jsonschema, for both), ``runner`` (running calls with limits), ``toolbox`` (the
environment-side helper), ``agent`` (AgentTools and report_reward for the gateway's
agents) and ``wire`` (the OpenAI request and reply formats). Imports no torch.
"""
