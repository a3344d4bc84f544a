"""The planner: what a run will need before it starts. Imports no torch.

Memory per GPU (``gpu_memory``: training states, gathered layers, activations, the
engine's weights and KV cache from ``engine_memory``), model sizes from config.json or
``known_models``, the ``grouprl plan`` tables (``render``, ``rows``), and ``check_run``:
the config's checks plus the memory plan's, before anything loads.
"""
