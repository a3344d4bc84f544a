"""Environments: the episode loop's side of a rollout (tools, multi-turn envs)."""
