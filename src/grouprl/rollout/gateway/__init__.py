"""The agent gateway (env.agent, docs/gateway.md): an OpenAI-compatible server in front
of the engine (``server``, ``http``), the record of each episode's turns (``record``),
the rollout that runs the user's agents in worker processes (``agents``) and what runs
inside those workers (``worker``).
"""
