"""Rollout: prompts in, scored trajectories out (``builder`` starts the parts; ``episodes``
runs an environment's turns; ``gateway`` serves the user's own agent, env.agent)."""
