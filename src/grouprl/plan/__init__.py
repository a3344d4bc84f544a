"""The planner: what a run will need before it starts. Imports no torch.

Memory per GPU (``gpu_memory``: training states, gathered layers, activations, the
engine's weights and KV cache from ``engine_memory``), model sizes from config.json or
``known_models``, the ``grouprl plan`` tables (``render``; ``batch_rows`` per rank,
``rollout_rows`` for the engine replicas, ``rows`` for models and memory) for the machines
the recipe asks for (``target``; ``--here``: this one), laid out for the terminal's width
(``layout``) or as JSON (``report``), and ``check_run``: the config's checks plus the memory
plan's, before anything loads; a memory error offers the changes that fit (``fixes``).
"""
