"""Worker groups: where the training roles (policy, reference, critic) run.

World size 1 runs every role in the driver's process (``LocalGroup``); larger runs
start one Ray actor per rank (``RayGroup``), join them into a torch.distributed group
and shard each model with FSDP2. The driver owns the loop either way.
"""
