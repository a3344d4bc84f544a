"""The worker layer: what runs on each training rank.

Roles, one class each (``PolicyWorker``, ``ReferenceWorker``, ``CriticWorker``), built
once per rank by a worker group (``group``: this process for world size 1,
``ray_group``: one Ray actor per rank, joined into a torch.distributed group and
sharded with FSDP2). The driver calls a role's methods through ``group.Role`` by the
method itself (``policy.call(PolicyWorker.update, batch, ...)``), never by a string.
The rest is the per-rank training code the roles use: model loading, LoRA, the scorer
(logprobs), packing, the update, the optimizer and the critic's value model.
"""
