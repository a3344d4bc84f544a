"""Rollout engines: generate groups of completions, take new weights in place.

``make_engine`` picks the backend from ``rollout.engine``; transformers and
vllm are imported only when a backend is built.
"""

from grouprl.rollout.base import RolloutEngine, SamplingSettings
from grouprl.rollout.engines import EngineUnavailableError, make_engine

__all__ = ["EngineUnavailableError", "RolloutEngine", "SamplingSettings", "make_engine"]
