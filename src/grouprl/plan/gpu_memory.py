"""Memory per GPU of a run, estimated from config.json and the run config alone (no torch).

``grouprl plan`` shows every term and ``plan.check_run`` rejects a run whose estimated
peak exceeds ``cluster.gpu``. These are estimates, not measurements: the allocator's
fragmentation, NCCL buffers, temporary copies and FSDP2's padding come on top, so a plan
within a few GiB of the GPU's size may still run out of memory.

Sizes from config.json: V vocab, H hidden, I intermediate, L layers, q = heads x head_dim,
kv = kv_heads x head_dim. P the policy's parameters, Pc the critic's, W the training
ranks (``RunConfig.world_size``), N = train.micro_batch_size x max tokens per sample (the
tokens of one rank's forward/backward: micro_batch_size counts one rank's samples, and
the config checks hold it to the rank's share of a mini-batch, mini_batch_size / W).
Training keeps float32 master weights and AdamW states, sharded by FSDP2, and computes
under bf16 autocast::

    one training GPU, training phase
      CUDA context     0.5 GiB (the trainer process)
      policy states    P x 16 / W      fp32 weights 4 + grads 4 + AdamW moments 8; 0 with
                                       cluster.offload (W > 1: one rank is never sharded);
                                       P x 8 / W with cluster.offload_optimizer
      reference        P x 2 / W       algo.beta > 0; bf16 (model.dtype); 0 with offload
      critic states    Pc x 16 / W     a critic: section; 0 with offload
      gathered params  (2 x layer + root) x 4 when sharded: one decoder layer gathered, one
                       prefetched, the root (embeddings, final norm, untied lm_head) kept
                       gathered through forward/backward; one rank: already resident
      activations      N x L x ((6H + 2q + 2kv + 4I) x 2 + 8H)   bf16 tensors saved for
                       backward, 8H for the fp32 copies the RMSNorms keep;
                       with train.activation_checkpointing: N x L x 2H (layer inputs)
                       + N x one layer's term above (recomputed in backward)
      logprob chunk    min(train.logprob_chunk_tokens, N) x V x 4 x 3   fp32 logits,
                       log-softmax and their gradient
      critic pass      the critic's gathered params + activations (same N); it runs apart
                       from the policy's pass, so the phase counts the larger of the two
      optimizer step   cluster.offload_optimizer: P x 8 / W of moments brought in for the
                       step, after backward freed the activations (the larger of this, the
                       critic's, and the passes)
    a vLLM engine replica: on the GPUs of tensor_parallel_size training ranks (rollout.gpus=0,
    colocated; every training GPU of a replica holds this) or on GPUs of its own
    (rollout.gpus > 0, dedicated); per GPU of the replica
      claim            rollout.gpu_memory_utilization x GPU size
      weights          P x 2 / rollout.tensor_parallel_size
      overhead         1 GiB (its CUDA context, activations, CUDA graphs)
      KV cache         claim - weights - overhead
      per token        2 (K and V) x L x max(1, kv_heads / tp) x head_dim x 2 (tp:
                       rollout.tensor_parallel_size; vLLM replicates KV heads beyond kv_heads)
      sequences        KV cache // (rollout.max_model_len x per token), full-length at once
    phases
      training         context + states + reference + the larger pass; a colocated engine
                       sleeps (~0) meanwhile
      generation       colocated: engine claim + context + states + reference (no
                       activations); dedicated: the engine's GPU, its claim

``problems`` (which ``plan.check_run`` raises): the larger phase over the GPU's size; the
engine's weights over its claim; a KV cache smaller than one rollout.max_model_len sequence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from grouprl.config.errors import ConfigError, show
from grouprl.config.schema import RunConfig
from grouprl.plan.engine_memory import Engine, engine_dtype, engine_plan, engine_problems
from grouprl.plan.memory import (
    ADAMW_FP32_BYTES,
    DecoderShape,
    MemoryRow,
    ParamCount,
    SizeUnknown,
    activation_bytes,
    decoder_shape,
    estimate_params,
    human_bytes,
    human_count,
    layer_activation_bytes,
    model_config,
)

if TYPE_CHECKING:
    from grouprl.config.checks import Derived

MiB = 1024**2
GiB = 1024**3
CUDA_CONTEXT = GiB // 2
GATHERED_LAYERS = 2  # the layer computing and the one FSDP2 prefetches
FP32 = 4
MOMENT_BYTES = 2 * FP32  # AdamW's two fp32 moments per trained parameter

# total memory as nvidia-smi reports it
GPU_MEMORY: dict[str, int] = {
    "H100": 81559 * MiB,
    "H100-80GB": 81559 * MiB,
    "H200": 143771 * MiB,
    "A100-80GB": 81920 * MiB,
    "A100-40GB": 40960 * MiB,
    "L40S": 46068 * MiB,
    "L4": 23034 * MiB,
    "A10G": 23028 * MiB,
    "B200": 183359 * MiB,
}
SIZE_UNITS = {
    **{f"{p}b": 1000**i for i, p in enumerate("kmgt", start=1)},
    **{f"{p}ib": 1024**i for i, p in enumerate("kmgt", start=1)},
}
SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]i?b)", re.IGNORECASE)


def parse_gpu(text: str) -> tuple[str, int]:
    """``(label, bytes)`` of a ``cluster.gpu`` value: a name in ``GPU_MEMORY`` (any case)
    or a size such as ``80GiB``, ``48GB`` or ``24000MiB``."""
    names = {name.lower(): name for name in GPU_MEMORY}
    if text.strip().lower() in names:
        name = names[text.strip().lower()]
        return name, GPU_MEMORY[name]
    match = SIZE.fullmatch(text.strip())
    if match and float(match[1]) > 0:
        return text.strip(), int(float(match[1]) * SIZE_UNITS[match[2].lower()])
    raise ConfigError(
        f"cluster.gpu={show(text)} is neither a GPU the memory planner knows "
        f"({', '.join(GPU_MEMORY)}) nor a size; set cluster.gpu to one of those names, to a "
        "size such as 80GiB, 48GB or 24000MiB (KB/MB/GB/TB or KiB/MiB/GiB/TiB), or to null "
        "(no memory check)."
    )


@dataclass(frozen=True)
class GpuPlan:
    """One training GPU and, with rollout.gpus > 0, one generation GPU; estimates."""

    gpu: str  # label: a GPU name or the size as written
    gpu_bytes: int
    training_gpu: list[MemoryRow]  # with the engine's rows when colocated
    generation_gpu: list[MemoryRow]  # the engine's own GPU (rollout.gpus > 0), else []
    training_phase: int  # the training GPU while training
    generation_phase: int  # colocated: the training GPU while generating; else the engine's
    colocated: bool
    engine: Engine | None  # None with rollout.engine=hf
    problems: list[str]

    @property
    def peak(self) -> int:
        return max(self.training_phase, self.generation_phase)

    @property
    def fits(self) -> bool:
        return self.peak <= self.gpu_bytes


def gpu_name_problems(cfg: RunConfig) -> list[str]:
    """The message for a ``cluster.gpu`` that ``parse_gpu`` does not understand."""
    if cfg.cluster.gpu is None:
        return []
    try:
        parse_gpu(cfg.cluster.gpu)
    except ConfigError as err:
        return [str(err)]
    return []


def gpu_memory_problems(cfg: RunConfig, derived: Derived) -> list[str]:
    """The planner's problems; none without cluster.gpu, on CPU, or when a model's
    config.json is unknown (``grouprl plan`` says the check was skipped)."""
    if cfg.cluster.gpu is None or cfg.train.device == "cpu":
        return []
    try:
        return plan_for_run(cfg, derived).problems
    except SizeUnknown:
        return []


def plan_for_run(cfg: RunConfig, derived: Derived) -> GpuPlan:
    """``plan_gpu_memory`` with the policy's (and critic's) config.json found on disk or in
    ``plan/known_models.py``; ``SizeUnknown`` when one is not."""
    config, _ = model_config(cfg.model.path, revision=cfg.model.revision)
    critic_config = None
    if cfg.critic is not None and cfg.critic.path != cfg.model.path:
        critic_config, _ = model_config(cfg.critic.path)
    return plan_gpu_memory(cfg, derived, config=config, critic_config=critic_config)


def plan_gpu_memory(
    cfg: RunConfig,
    derived: Derived,
    *,
    config: dict[str, Any],
    critic_config: dict[str, Any] | None = None,
) -> GpuPlan:
    """The memory of one training GPU and one generation GPU, with ``problems``.

    ``config`` is the policy's config.json; ``critic_config`` the critic's (None: the
    policy's). Needs ``cluster.gpu`` set."""
    assert cfg.cluster.gpu is not None, "plan_gpu_memory needs cluster.gpu"
    label, gpu_bytes = parse_gpu(cfg.cluster.gpu)
    trainer = _trainer(cfg, derived, config=config, critic_config=critic_config or config)
    engine = None
    if cfg.rollout.engine == "vllm":
        engine = engine_plan(cfg, config=config, gpu_bytes=gpu_bytes, gpu=label)
    colocated = cfg.rollout.gpus == 0
    generation = trainer.resident + (engine.claim if engine and colocated else 0)
    if engine and not colocated:
        generation = engine.claim
    engine_rows = engine.rows if engine else []
    plan = GpuPlan(
        gpu=label,
        gpu_bytes=gpu_bytes,
        training_gpu=trainer.rows + (engine_rows if colocated else []),
        generation_gpu=[] if colocated else engine_rows,
        training_phase=trainer.resident + trainer.working,
        generation_phase=generation,
        colocated=colocated,
        engine=engine,
        problems=[],
    )
    plan.problems.extend(engine_problems(cfg, engine))
    plan.problems.extend(_peak_problems(cfg, derived, plan=plan, trainer=trainer))
    return plan


@dataclass(frozen=True)
class _Trainer:
    rows: list[MemoryRow]
    resident: int  # context + states + reference: held in both phases
    working: int  # the larger of the policy's and the critic's forward/backward
    states: int  # policy + critic optimizer states on the GPU
    moments: int  # the AdamW moments among them (cluster.offload_optimizer moves them)
    activations: int  # the policy's
    activations_checkpointed: int  # the policy's with train.activation_checkpointing=true


def _trainer(
    cfg: RunConfig, derived: Derived, *, config: dict[str, Any], critic_config: dict[str, Any]
) -> _Trainer:
    world, tokens = derived.world_size, derived.max_tokens_per_pass
    shape, count = decoder_shape(config), estimate_params(config)
    adapters = lora_params(shape, cfg.train.lora.rank)
    policy_states = _states_row(
        "policy states", count.causal_lm, world=world, cfg=cfg, adapters=adapters
    )
    resident = [
        MemoryRow("CUDA context", CUDA_CONTEXT, "the trainer process (about 0.5 GiB)"),
        policy_states,
    ]
    if cfg.algo.beta > 0 and not cfg.train.lora.rank:  # LoRA: the base, adapters off
        resident.append(_reference_row(cfg, count.causal_lm, world=world))
    policy_pass = _policy_pass(cfg, derived, shape=shape, count=count)
    working, states, critic = sum(r.bytes for r in policy_pass), policy_states.bytes, []
    moments = [_moments(count.causal_lm, world=world, adapters=adapters)]
    if cfg.critic is not None:
        critic_states, critic_pass = _critic_rows(cfg, critic_config, tokens=tokens, world=world)
        resident.append(critic_states)
        critic = [critic_pass]
        working, states = max(working, critic_pass.bytes), states + critic_states.bytes
        moments.append(_moments(estimate_params(critic_config).value_model, world=world))
    step = []
    if cfg.cluster.offload_optimizer:  # the policy and the critic step one after the other
        step = [
            MemoryRow(
                "optimizer step",
                max(moments),
                "cluster.offload_optimizer=true: AdamW moments (8 bytes per trained param) "
                "brought from CPU memory for the optimizer step, after backward freed the "
                "activations; the phase counts the larger of this and the passes",
            )
        ]
        working = max(working, max(moments))
    return _Trainer(
        rows=resident + policy_pass + critic + step,
        resident=sum(r.bytes for r in resident),
        working=working,
        states=states,
        moments=0 if cfg.cluster.offload_optimizer else sum(moments),
        activations=policy_pass[1].bytes,
        activations_checkpointed=activation_bytes(shape, tokens=tokens, checkpointing=True),
    )


def _policy_pass(
    cfg: RunConfig, derived: Derived, *, shape: DecoderShape, count: ParamCount
) -> list[MemoryRow]:
    """Gathered params, activations and logprob chunk of the policy's forward/backward."""
    per, micro = derived.max_tokens_per_sample, derived.micro_batch_size
    tokens = derived.max_tokens_per_pass
    where = (
        f"train.micro_batch_size={micro} per rank x {per}"
        if cfg.train.micro_batch_tokens is None
        else f"train.micro_batch_tokens, or one {per}-token sample"
    )
    ckpt = cfg.train.activation_checkpointing
    chunk = min(cfg.train.logprob_chunk_tokens, tokens)
    return [
        _gathered_row(shape, count, head=count.lm_head, sharded=derived.world_size > 1),
        MemoryRow(
            "activations",
            activation_bytes(shape, tokens=tokens, checkpointing=ckpt),
            f"{tokens:,} tokens ({where}) x " + _activation_text(shape, ckpt=ckpt),
        ),
        MemoryRow(
            "logprob chunk",
            chunk * shape.vocab * FP32 * 3,
            f"{chunk:,} tokens (train.logprob_chunk_tokens) x {shape.vocab:,} vocab x 4 bytes "
            "x 3 (fp32 logits, log-softmax, their gradient)",
        ),
    ]


def _states_row(
    what: str, params: int, *, world: int, cfg: RunConfig, adapters: int = 0
) -> MemoryRow:
    moved = cfg.cluster.offload_optimizer  # the moments wait in CPU memory
    trained = ADAMW_FP32_BYTES - (MOMENT_BYTES if moved else 0)  # bytes per trained param
    kept = "fp32 weights, grads" + ("" if moved else ", 2 AdamW moments")
    per_rank = params * trained // world
    how = f"{human_count(params)} params x {trained} bytes ({kept})"
    if adapters:  # LoRA: a frozen fp32 base, and adapters that train
        per_rank = (params * FP32 + adapters * trained) // world
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


def _moments(params: int, *, world: int, adapters: int = 0) -> int:
    """Bytes per rank of AdamW's two fp32 moments of the trained parameters (the LoRA
    adapters when there are any)."""
    return (adapters or params) * MOMENT_BYTES // world


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


def _gathered_row(shape: DecoderShape, count: ParamCount, *, head: int, sharded: bool) -> MemoryRow:
    if not sharded:
        return MemoryRow("gathered params", 0, "one rank: the whole model is resident already")
    layer = (count.decoder - shape.vocab * shape.hidden - shape.hidden) // shape.layers
    root = shape.vocab * shape.hidden + shape.hidden + head
    head_text = ", untied lm_head" if head else ""
    return MemoryRow(
        "gathered params",
        (GATHERED_LAYERS * layer + root) * FP32,
        f"FSDP2 gathers a decoder layer ({human_count(layer)} params) and prefetches the "
        f"next, and keeps the root ({human_count(root)}: embeddings, final norm{head_text}) "
        f"gathered: (2 x {human_count(layer)} + {human_count(root)}) x 4 bytes (fp32)",
    )


def _activation_text(shape: DecoderShape, *, ckpt: bool) -> str:
    per_layer = f"{layer_activation_bytes(shape):,} bytes ((6H + 2q + 2kv + 4I) x 2 + 8H)"
    if ckpt:
        return (
            f"({shape.layers} layers x 2H layer inputs + one layer's {per_layer}, recomputed) "
            "(train.activation_checkpointing=true)"
        )
    return f"{shape.layers} layers x {per_layer} (train.activation_checkpointing=false)"


def _critic_rows(
    cfg: RunConfig, config: dict[str, Any], *, tokens: int, world: int
) -> tuple[MemoryRow, MemoryRow]:
    shape, count = decoder_shape(config), estimate_params(config)
    states = _states_row("critic states", count.value_model, world=world, cfg=cfg)
    head = shape.hidden + 1  # the scalar value head, part of the root unit
    gathered = _gathered_row(shape, count, head=head, sharded=world > 1)
    acts = activation_bytes(shape, tokens=tokens, checkpointing=cfg.train.activation_checkpointing)
    critic_pass = MemoryRow(
        "critic pass",
        gathered.bytes + acts,
        f"the critic's gathered params ({human_bytes(gathered.bytes)}) + activations for the "
        f"same {tokens:,} tokens ({human_bytes(acts)}); it runs apart from the policy's pass, "
        "so the training phase counts the larger of the two",
    )
    return states, critic_pass


def _peak_problems(
    cfg: RunConfig, derived: Derived, *, plan: GpuPlan, trainer: _Trainer
) -> list[str]:
    if plan.fits:
        return []
    training_over = plan.training_phase > plan.gpu_bytes
    phase = "training" if plan.training_phase >= plan.generation_phase else "generation"
    c, t = cfg.cluster, cfg.train
    fixes = []
    if not c.offload and trainer.moments:
        fixes.append(
            f"cluster.offload_optimizer=true (keeps {human_bytes(trainer.moments)} of AdamW "
            "moments in CPU memory except during each optimizer step)"
        )
    if derived.world_size > 1 and not c.offload and trainer.states:
        fixes.append(
            f"cluster.offload=true (moves {human_bytes(trainer.states)} of weights, grads "
            "and AdamW states to CPU memory)"
        )
    if training_over and not t.activation_checkpointing:
        fixes.append(
            f"train.activation_checkpointing=true (activations {human_bytes(trainer.activations)}"
            f" -> {human_bytes(trainer.activations_checkpointed)})"
        )
    if training_over and t.micro_batch_tokens is not None:
        fixes.append(f"a lower train.micro_batch_tokens (now {t.micro_batch_tokens})")
    elif training_over and t.micro_batch_size > 1:
        fixes.append(f"a lower train.micro_batch_size (now {t.micro_batch_size})")
    if plan.generation_phase > plan.gpu_bytes and plan.colocated:
        fixes.append(
            f"a lower rollout.gpu_memory_utilization (now "
            f"{show(cfg.rollout.gpu_memory_utilization)}) or rollout.gpus=1 (the engine on a "
            "GPU of its own)"
        )
    fixes.append(
        f"more GPUs (cluster.nodes={c.nodes}, cluster.gpus_per_node={c.gpus_per_node}): "
        "the states shrink with the training ranks"
    )
    listed = ", ".join(fixes[:-1]) + (", or " if len(fixes) > 1 else "") + fixes[-1]
    return [
        f"estimated peak memory per GPU is {human_bytes(plan.peak)} ({phase} phase; training "
        f"{human_bytes(plan.training_phase)}, generation {human_bytes(plan.generation_phase)}), "
        f"{human_bytes(plan.peak - plan.gpu_bytes)} more than cluster.gpu={plan.gpu} has "
        f"({human_bytes(plan.gpu_bytes)}); `grouprl plan` shows each term. Try, in this "
        f"order: {listed}."
    ]
