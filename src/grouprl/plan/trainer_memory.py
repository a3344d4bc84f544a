"""The trainer process's share of a training GPU, from config.json and the run config
(no torch); ``plan/gpu_memory.py`` adds the engines and the allocator. Per rank (W ranks;
P the policy's parameters, Pc the critic's; N = train.micro_batch_size x T tokens per
pass, T per sample; the other letters as in ``plan/memory.py``)::

    held in both phases
      policy states    P x 16 / W: fp32 weights 4 + grads 4 + AdamW moments 8 (the grads
                       outlive the step: they are dropped when the next mini-batch starts);
                       0 with cluster.offload (W > 1: one rank is never sharded); P x 8 / W
                       with cluster.offload_optimizer
      reference        P x 2 / W with algo.beta > 0 (model.dtype); 0 with cluster.offload
      critic states    Pc x 16 / W with a critic: section; 0 with cluster.offload
    the training phase's working memory: the larger of the passes and the step
      gathered params  (2 x layer + root) x b when sharded: one decoder layer gathered, one
                       prefetched, the root (embeddings, final norm, untied lm_head) kept
                       gathered through forward/backward; b = 2 with a 16-bit model.dtype
                       (FSDP2's mixed precision gathers the float32 shards cast to bf16,
                       ``workers/fsdp.py``), 4 with float32; one rank: already resident
      autocast copies  one rank with a 16-bit model.dtype (no FSDP2: torch.autocast over
                       the float32 weights): (L x layer linears + V x H) x 2, bf16 casts of
                       the decoder's linear weights and of the LM head. torch.autocast
                       caches the cast of each weight until the forward returns, and each
                       linear keeps its cast for backward, so all are alive at the
                       forward's end. Sharded ranks: 0, FSDP2 casts each unit as it
                       gathers it and frees it after use (autocast over FSDP2's float32
                       gathers would cache a bf16 copy of the whole model on every rank:
                       133 GiB planned for the 72B recipe's full fine-tuning, issue 28)
      activations      N x (L x (26H + 8q + 8I + 2T) + 16H) under autocast, N x (L x (16H
                       + 8q + 8I + 2T) + 10H) under FSDP2's bf16 (``plan/memory.py``); with
                       train.activation_checkpointing each layer keeps its input (4H, 2H)
                       and one layer is recomputed
      logprob chunk    min(train.logprob_chunk_tokens, N) x V x 4 x 4: fp32 logits,
                       log-softmax, and the entropy's exp(logp) and exp(logp) x logp
      critic pass      the critic's gathered params, autocast copies (one rank) and
                       activations (same N); it runs apart from the policy's pass, so the
                       larger counts
      optimizer step   P x 4 / W: AdamW's foreach step takes the square root of the second
                       moments into new tensors; + P x 8 / W of moments brought back with
                       cluster.offload_optimizer. It follows backward, which freed the
                       activations
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grouprl.config.checks import Derived
from grouprl.config.schema import RunConfig
from grouprl.plan.engine_memory import engine_dtype
from grouprl.plan.memory import (
    ADAMW_FP32_BYTES,
    FP32_BYTES,
    HEAD_BYTES_PER_H,
    LAYER_BYTES_PER_H,
    STREAM_BYTES,
    DecoderShape,
    MemoryRow,
    ParamCount,
    Precision,
    activation_bytes,
    decoder_shape,
    estimate_params,
    human_bytes,
    human_count,
    layer_activation_bytes,
)

GATHERED_LAYERS = 2  # the layer computing and the one FSDP2 prefetches
MOMENT_BYTES = 2 * FP32_BYTES  # AdamW's two fp32 moments per trained parameter
BF16 = 2
CHUNK_TENSORS = 4  # float32 vocab-sized tensors of one logprob chunk


@dataclass(frozen=True)
class Trainer:
    """The trainer process's live bytes on one training GPU (no CUDA context)."""

    resident: list[MemoryRow]  # held in both phases
    passes: list[MemoryRow]  # the training phase's working rows (the larger counts)
    working: int  # the larger of the policy's pass, the critic's pass, the optimizer step

    @property
    def held(self) -> int:
        return sum(r.bytes for r in self.resident)


def trainer_memory(
    cfg: RunConfig, derived: Derived, *, config: dict[str, Any], critic_config: dict[str, Any]
) -> Trainer:
    world = derived.world_size
    shape, count = decoder_shape(config), estimate_params(config)
    adapters = lora_params(shape, cfg.train.lora.rank)
    policy_states = _states_row(
        "policy states", count.causal_lm, world=world, cfg=cfg, adapters=adapters
    )
    resident = [policy_states]
    if cfg.algo.beta > 0 and not cfg.train.lora.rank:  # LoRA: the base, adapters off
        resident.append(_reference_row(cfg, count.causal_lm, world=world))
    policy_pass = _policy_pass(cfg, derived, shape=shape, count=count)
    working, critic = sum(r.bytes for r in policy_pass), []
    trained = [adapters or count.causal_lm]
    if cfg.critic is not None:
        critic_states, critic_pass = _critic_rows(cfg, derived, critic_config)
        resident.append(critic_states)
        critic = [critic_pass]
        working = max(working, critic_pass.bytes)
        trained.append(estimate_params(critic_config).value_model)
    step = _step_row(cfg, trained=max(trained), world=world)
    return Trainer(
        resident=resident,
        passes=policy_pass + critic + [step],
        working=max(working, step.bytes),
    )


def precision(cfg: RunConfig, *, world: int) -> Precision:
    """How the training passes compute (``workers/common.autocast``): sharded ranks with a
    16-bit model.dtype under FSDP2's mixed precision, one rank under autocast. A float32
    model.dtype computes in float32, whose activations are planned as autocast's."""
    return "fsdp2" if world > 1 and cfg.model.dtype != "float32" else "autocast"


def _policy_pass(
    cfg: RunConfig, derived: Derived, *, shape: DecoderShape, count: ParamCount
) -> list[MemoryRow]:
    """Gathered params, autocast copies, activations and logprob chunk of the policy's
    forward/backward."""
    per, micro = derived.max_tokens_per_sample, derived.micro_batch_size
    tokens = derived.max_tokens_per_pass
    where = (
        f"train.micro_batch_size={micro} per rank x {per}"
        if cfg.train.micro_batch_tokens is None
        else f"train.micro_batch_tokens, or one {per}-token sample"
    )
    ckpt, world = cfg.train.activation_checkpointing, derived.world_size
    how = precision(cfg, world=world)
    chunk = min(cfg.train.logprob_chunk_tokens, tokens)
    acts = activation_bytes(shape, tokens=tokens, seq_len=per, checkpointing=ckpt, precision=how)
    text = _activation_text(shape, seq_len=per, ckpt=ckpt, precision=how)
    return [
        _gathered_row(shape, count, head=count.lm_head, world=world, cfg=cfg),
        _copies_row(cfg, shape, count, world=world),
        MemoryRow("activations", acts, f"{tokens:,} tokens ({where}) x {text}"),
        MemoryRow(
            "logprob chunk",
            chunk * shape.vocab * FP32_BYTES * CHUNK_TENSORS,
            f"{chunk:,} tokens (train.logprob_chunk_tokens) x {shape.vocab:,} vocab x 4 bytes "
            "x 4 (fp32 logits, log-softmax, and the entropy's exp(logp) and its product)",
        ),
    ]


def _copies_row(cfg: RunConfig, shape: DecoderShape, count: ParamCount, *, world: int) -> MemoryRow:
    linears = shape.layers * count.layer_linears
    head = shape.vocab * shape.hidden
    if cfg.model.dtype == "float32":
        return MemoryRow("autocast copies", 0, "model.dtype=float32: no autocast, no copies")
    if world > 1:
        return MemoryRow(
            "autocast copies",
            0,
            f"none: {world} ranks train under FSDP2's mixed precision (bf16 layers gathered "
            "and freed one at a time, in gathered params), not autocast",
        )
    if cfg.train.lora.rank and cfg.train.activation_checkpointing:
        # frozen weights are not cached, and checkpointing keeps no layer's cast
        linears = count.layer_linears
    return MemoryRow(
        "autocast copies",
        (linears + head) * BF16,
        f"bf16 casts of the float32 weights, kept from the forward to the backward: "
        f"{human_count(linears)} linear weights + {human_count(head)} LM head x 2 bytes "
        "(one rank: torch.autocast, no FSDP2)",
    )


def _step_row(cfg: RunConfig, *, trained: int, world: int) -> MemoryRow:
    if cfg.cluster.offload and world > 1:
        return MemoryRow("optimizer step", 0, "cluster.offload=true: AdamW steps in CPU memory")
    temporary = trained * FP32_BYTES // world
    how = (
        f"AdamW's foreach step: the square root of the second moments, {human_count(trained)} "
        f"trained params x 4 bytes / {world} rank(s)"
    )
    if cfg.cluster.offload_optimizer:
        how += " + their moments x 8 bytes, brought from CPU memory (cluster.offload_optimizer)"
        temporary += trained * MOMENT_BYTES // world
    return MemoryRow(
        "optimizer step",
        temporary,
        how + "; after backward freed the activations, so the phase counts the larger of "
        "this and the passes",
    )


def _states_row(
    what: str, params: int, *, world: int, cfg: RunConfig, adapters: int = 0
) -> MemoryRow:
    moved = cfg.cluster.offload_optimizer  # the moments wait in CPU memory
    trained = ADAMW_FP32_BYTES - (MOMENT_BYTES if moved else 0)  # bytes per trained param
    kept = "fp32 weights, grads" + ("" if moved else ", 2 AdamW moments")
    per_rank = params * trained // world
    how = f"{human_count(params)} params x {trained} bytes ({kept})"
    if adapters:  # LoRA: a frozen fp32 base, and adapters that train
        per_rank = (params * FP32_BYTES + adapters * trained) // world
        how = (
            f"{human_count(params)} frozen params x 4 bytes + {human_count(adapters)} LoRA "
            f"params x {trained} bytes ({kept}; train.lora)"
        )
    moments = "; the AdamW moments wait in CPU memory (cluster.offload_optimizer)" if moved else ""
    if world == 1:
        note = "; cluster.offload needs 2+ ranks" if cfg.cluster.offload else ""
        return MemoryRow(what, per_rank, f"{how} on one rank, unsharded{moments}{note}")
    how += f" / {world} ranks (FSDP2)"
    if cfg.cluster.offload:
        return MemoryRow(what, 0, f"cluster.offload=true: {how} = {human_bytes(per_rank)} in CPU")
    return MemoryRow(what, per_rank, how + moments)


def lora_params(shape: DecoderShape, rank: int) -> int:
    """Adapter parameters of LoRA rank ``rank`` on every linear layer of the decoder
    (q, k, v, o, gate, up, down: r x (inputs + outputs) each); an upper bound for fewer
    target modules."""
    H, q, kv, inter = shape.hidden, shape.q_out, shape.kv_out, shape.intermediate
    return rank * (7 * H + 2 * q + 2 * kv + 3 * inter) * shape.layers


def _reference_row(cfg: RunConfig, params: int, *, world: int) -> MemoryRow:
    size, dtype = engine_dtype(cfg)
    per_rank = params * size // world
    how = f"algo.beta > 0: frozen copy, {human_count(params)} params x {size} bytes ({dtype})"
    how += f" / {world} ranks" if world > 1 else ""
    if cfg.cluster.offload and world > 1:  # one rank trains without FSDP2, so no offload
        return MemoryRow("reference", 0, f"cluster.offload=true: {how} in CPU")
    return MemoryRow("reference", per_rank, how)


def _gathered_row(
    shape: DecoderShape, count: ParamCount, *, head: int, world: int, cfg: RunConfig
) -> MemoryRow:
    if world == 1:
        return MemoryRow("gathered params", 0, "one rank: the whole model is resident already")
    layer = (count.decoder - shape.vocab * shape.hidden - shape.hidden) // shape.layers
    root = shape.vocab * shape.hidden + shape.hidden + head
    head_text = ", untied lm_head" if head else ""
    size = FP32_BYTES if precision(cfg, world=world) == "autocast" else BF16
    dtype = "fp32" if size == FP32_BYTES else f"model.dtype={cfg.model.dtype}: FSDP2 gathers bf16"
    return MemoryRow(
        "gathered params",
        (GATHERED_LAYERS * layer + root) * size,
        f"FSDP2 gathers a decoder layer ({human_count(layer)} params) and prefetches the "
        f"next, and keeps the root ({human_count(root)}: embeddings, final norm{head_text}) "
        f"gathered: (2 x {human_count(layer)} + {human_count(root)}) x {size} bytes ({dtype})",
    )


def _activation_text(shape: DecoderShape, *, seq_len: int, ckpt: bool, precision: Precision) -> str:
    per_h, head_h = LAYER_BYTES_PER_H[precision], HEAD_BYTES_PER_H[precision]
    stream = (
        "bf16 under autocast over an fp32 residual stream"
        if precision == "autocast"
        else "FSDP2's bf16 layers: a bf16 residual stream"
    )
    per_layer = (
        f"{layer_activation_bytes(shape, seq_len=seq_len, precision=precision):,} bytes "
        f"({per_h}H + 8q + 8I + 2T, {stream})"
    )
    if ckpt:
        kept = STREAM_BYTES[precision]
        dtype = "fp32" if kept == FP32_BYTES else "bf16"
        return (
            f"({shape.layers} layers x {kept}H {dtype} layer inputs + one layer's {per_layer}, "
            f"recomputed, + {head_h}H at the head) (train.activation_checkpointing=true)"
        )
    return (
        f"({shape.layers} layers x {per_layer} + {head_h}H at the head) "
        "(train.activation_checkpointing=false)"
    )


def _critic_rows(
    cfg: RunConfig, derived: Derived, config: dict[str, Any]
) -> tuple[MemoryRow, MemoryRow]:
    world, tokens = derived.world_size, derived.max_tokens_per_pass
    shape, count = decoder_shape(config), estimate_params(config)
    states = _states_row("critic states", count.value_model, world=world, cfg=cfg)
    head = shape.hidden + 1  # the scalar value head, part of the root unit
    gathered = _gathered_row(shape, count, head=head, world=world, cfg=cfg)
    autocast = cfg.model.dtype != "float32" and world == 1
    copies = shape.layers * count.layer_linears * BF16 if autocast else 0
    acts = activation_bytes(
        shape,
        tokens=tokens,
        seq_len=derived.max_tokens_per_sample,
        checkpointing=cfg.train.activation_checkpointing,
        precision=precision(cfg, world=world),
    )
    critic_pass = MemoryRow(
        "critic pass",
        gathered.bytes + copies + acts,
        f"the critic's gathered params ({human_bytes(gathered.bytes)}), autocast copies "
        f"({human_bytes(copies)}) and activations for the same {tokens:,} tokens "
        f"({human_bytes(acts)}); it runs apart from the policy's pass, so the training "
        "phase counts the larger of the two",
    )
    return states, critic_pass
