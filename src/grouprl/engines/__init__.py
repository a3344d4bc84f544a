"""Engines: generate groups of completions and take new weights in place.

The protocol (``RolloutEngine``, ``SamplingSettings``), the backends (hf, vLLM, a
vLLM server, an engine in a Ray actor), replicas of an engine, and weight transfer.
``make_engine`` picks the backend from ``rollout.engine``; transformers and vllm are
imported only when a backend is built.
"""
