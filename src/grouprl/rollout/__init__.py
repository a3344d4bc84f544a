"""Rollout: prompts in, scored trajectories out.

``setup`` loads the prompt set and builds the rollout function; ``episodes`` runs an
environment's turns against an engine (grouprl.engines); ``runner`` scores the
trajectories; ``gateway`` serves an agent of the user's own (env.agent).
"""
