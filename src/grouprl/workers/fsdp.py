"""FSDP2 sharding of a Hugging Face model held by a role on a multi-rank group.

Each decoder layer is its own FSDP unit (gathered for its forward and backward
only); the root unit is the role's scoring module (``TokenScorer`` or
``ValueScorer``), which holds the embeddings, final norm and head. Those stay
gathered for the root's whole forward, which is why the chunked head
computation lives inside the scorer's forward. Gradients are summed over the
ranks, not averaged: loss denominators already count the whole mini-batch.

Mixed precision is FSDP2's own (``MixedPrecisionPolicy``), not ``torch.autocast``: with
a 16-bit compute dtype each unit all-gathers its float32 shards cast to that dtype, so
the layer computing (and the one prefetched) is the only full copy, and it is freed after
its forward and again after its backward. The float32 shards stay the master weights the
optimizer steps; gradients are reduce-scattered in float32. Autocast over float32 shards
would instead cache a bf16 cast of every gathered layer until the forward returns: a
whole bf16 model on every rank. The residual stream, activations and LM-head matmul are
then bf16; the logits are upcast to float32 before the log-softmax (``workers/logprobs``).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import torch
from torch.distributed.fsdp import (
    CPUOffloadPolicy,
    FSDPModule,
    MixedPrecisionPolicy,
    OffloadPolicy,
    fully_shard,
)

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


def mixed_precision(compute_dtype: torch.dtype) -> MixedPrecisionPolicy:
    """FSDP2's policy for ``compute_dtype``: parameters gathered in it and gradients reduced
    in float32 when it is 16-bit; no casts at all when it is float32."""
    if compute_dtype == torch.float32:
        return MixedPrecisionPolicy()
    return MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)


def shard(
    scorer: torch.nn.Module,
    model: PreTrainedModel,
    *,
    offload: bool,
    compute_dtype: torch.dtype = torch.float32,
) -> None:
    """Shards ``model`` (held inside ``scorer``) over the default process group, in place.
    ``offload`` keeps parameters, gradients and optimizer states in CPU memory between
    uses (FSDP2's CPU offload). ``compute_dtype``: the dtype forward and backward run in
    (``mixed_precision``); the shards keep the dtype the model was loaded in."""
    policy = CPUOffloadPolicy() if offload else OffloadPolicy()
    precision = mixed_precision(compute_dtype)
    for layer in decoder_layers(model):
        fully_shard(layer, offload_policy=policy, mp_policy=precision)
    # the root's inputs are token ids and masks (a ValueScorer's: the whole batch record):
    # casting them would copy the batch's float fields for nothing
    root = dataclasses.replace(precision, cast_forward_inputs=False)
    fully_shard(scorer, offload_policy=policy, mp_policy=root)
    for unit in scorer.modules():  # each unit reduces its own gradients
        if isinstance(unit, FSDPModule):
            unit.set_gradient_divide_factor(1.0)
            unit.set_force_sum_reduction_for_comms(True)  # gloo has no pre-multiplied sum
