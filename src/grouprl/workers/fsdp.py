"""FSDP2 sharding of a Hugging Face model held by a role on a multi-rank group.

Each decoder layer is its own FSDP unit (gathered for its forward and backward
only); the root unit is the role's scoring module (``TokenScorer`` or
``ValueScorer``), which holds the embeddings, final norm and head. Those stay
gathered for the root's whole forward, which is why the chunked head
computation lives inside the scorer's forward. Gradients are summed over the
ranks, not averaged: loss denominators already count the whole mini-batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, OffloadPolicy, fully_shard

if TYPE_CHECKING:
    from transformers import PreTrainedModel


def decoder_layers(model: PreTrainedModel) -> torch.nn.ModuleList:
    """The repeated blocks of a Hugging Face decoder (``model.model.layers`` for
    Qwen2/Llama; the critic's ``base_model_prefix`` names its decoder the same way)."""
    decoder = getattr(model, model.base_model_prefix)
    layers = getattr(decoder, "layers", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise TypeError(
            f"{type(model).__name__}: no decoder.layers ModuleList to shard with FSDP2 "
            "(Qwen2/Llama-style models have one); run this model with cluster.nodes=1 "
            "cluster.workers_per_node=1"
        )
    return layers


def shard(scorer: torch.nn.Module, model: PreTrainedModel, *, offload: bool) -> None:
    """Shards ``model`` (held inside ``scorer``) over the default process group, in place.
    ``offload`` keeps parameters, gradients and optimizer states in CPU memory between
    uses (FSDP2's CPU offload)."""
    policy = CPUOffloadPolicy() if offload else OffloadPolicy()
    for layer in decoder_layers(model):
        fully_shard(layer, offload_policy=policy)
    fully_shard(scorer, offload_policy=policy)
    for unit in scorer.modules():  # each unit reduces its own gradients
        if isinstance(unit, FSDPModule):
            unit.set_gradient_divide_factor(1.0)
            unit.set_force_sum_reduction_for_comms(True)  # gloo has no pre-multiplied sum
