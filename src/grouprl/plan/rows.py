"""The models and memory sections of ``grouprl plan``: each model's weights with its
optimizer state (``plan/memory.py``), then, with ``cluster.gpu`` set, the memory per GPU
(``plan/gpu_memory.py``). No torch."""

from __future__ import annotations

from grouprl.config.checks import Derived
from grouprl.config.errors import show
from grouprl.config.replica_checks import replicas_per_node
from grouprl.config.schema import RunConfig
from grouprl.config.train import CriticConfig
from grouprl.plan.allocator import FRAGMENTATION
from grouprl.plan.gpu_memory import GPU_MEMORY, GpuPlan, plan_for_run
from grouprl.plan.memory import (
    ADAMW_FP32_BYTES,
    DTYPE_BYTES,
    MemoryRow,
    ParamCount,
    SizeUnknown,
    estimate_params,
    human_bytes,
    human_count,
    model_config,
    plural,
)

Row = tuple[str, str, str]  # quantity, value, how it follows from the config


def model_rows(cfg: RunConfig, d: Derived) -> list[Row]:
    """Each model's weights with its optimizer state; activations and the engine come on top."""
    adamw = [(ADAMW_FP32_BYTES, "float32 weights + grads + 2 AdamW moments")]
    policy, where = _param_count(cfg.model.path, revision=cfg.model.revision)
    count = policy.causal_lm if policy else None
    rows = [("policy", "yes", f"{cfg.model.path}, trained: " + _bytes_text(count, where, adamw))]
    known = policy is not None
    totals = [(count or 0) * ADAMW_FP32_BYTES]
    if d.reference_model:
        options = _reference_dtypes(cfg)
        how = "frozen copy, because algo.beta > 0: "
        rows.append(("reference model", "yes", how + _bytes_text(count, where, options)))
        totals = [totals[0] + (count or 0) * b for b, _ in options]
    elif cfg.algo.beta > 0:
        rows.append(("reference model", "no", "train.lora: the policy with its adapters off"))
    else:
        rows.append(("reference model", "no", "algo.beta=0: no frozen copy loaded"))
    if cfg.critic is not None:
        revision = cfg.model.revision if cfg.critic.path == cfg.model.path else None
        critic, critic_where = _param_count(cfg.critic.path, revision=revision)
        value_count = critic.value_model if critic else None
        memory = _bytes_text(value_count, critic_where, adamw)
        rows.append(("critic", "yes", _critic_text(cfg.critic, memory)))
        known = known and critic is not None
        totals = [t + (value_count or 0) * ADAMW_FP32_BYTES for t in totals]
    else:
        rows.append(("critic", "no", "critic=null: the advantages need no value model"))
    if known:
        per_device = " (CPU / GPU)" if len(totals) > 1 else ""
        rows.append(
            (
                "model memory",
                " / ".join(human_bytes(t) for t in totals),
                f"the sum of the above{per_device}; activations, logprob chunks and the "
                "rollout engine's own weights and KV cache come on top",
            )
        )
    return rows


def _param_count(path: str, *, revision: str | None) -> tuple[ParamCount | None, str]:
    try:
        config, where = model_config(path, revision=revision)
        return estimate_params(config), where
    except SizeUnknown as err:
        return None, str(err)


def _reference_dtypes(cfg: RunConfig) -> list[tuple[int, str]]:
    """Bytes per weight of the reference copy, which loads in the engine dtype."""
    dtype, device = cfg.model.dtype, cfg.train.device
    if dtype != "auto":
        return [(DTYPE_BYTES[dtype], f"model.dtype={dtype}")]
    cpu, gpu = (4, "float32 on CPU"), (2, "bf16 on GPU")
    return {"cpu": [cpu], "cuda": [gpu]}.get(device, [cpu, gpu])


def _bytes_text(params: int | None, where: str, options: list[tuple[int, str]]) -> str:
    """``1.23M params (from ...) x 4 bytes (float32 on CPU) / 2 (bf16 on GPU) = 4.71 MiB /
    2.35 MiB``; with an unknown count, ``where`` says why."""
    sizes = " / ".join(
        f"{b} bytes ({label})" if i == 0 else f"{b} ({label})"
        for i, (b, label) in enumerate(options)
    )
    if params is None:
        return f"parameters {where}; {sizes} per parameter"
    memory = " / ".join(human_bytes(params * b) for b, _ in options)
    return f"{human_count(params)} params (from {where}) x {sizes} = {memory}"


def _critic_text(critic: CriticConfig, memory: str) -> str:
    clip = (
        f"value clip {show(critic.value_clip)} (critic.value_clip)"
        if critic.value_clip is not None
        else "no value clip (critic.value_clip=null)"
    )
    warmup = (
        f"{critic.warmup_steps} warmup steps where only the critic learns (critic.warmup_steps)"
        if critic.warmup_steps
        else "no warmup (critic.warmup_steps=0)"
    )
    return (
        f"{critic.path} with a scalar value head, lr {critic.lr:g} (AdamW, constant), "
        f"{clip}, {warmup}; {memory}"
    )


def memory_rows(cfg: RunConfig, d: Derived) -> list[Row]:
    """One training GPU (and the engine's own GPU), the peak of each phase and whether it
    fits ``cluster.gpu``; a single row when there is nothing to check."""
    if cfg.cluster.gpu is None:
        how = "cluster.gpu=null: no memory check (set cluster.gpu=H100 or a size)"
        return [("memory check", "off", how)]
    if cfg.train.device == "cpu":
        return [("memory check", "off", "train.device=cpu: no GPU memory to check")]
    try:
        plan = plan_for_run(cfg, d, advise=False)  # the terms; the check says the rest
    except SizeUnknown as err:
        how = f"a model's size is {err}: no memory check until its config.json is on disk"
        return [("memory check", "skipped", how)]
    ranks = f"{cfg.cluster.nodes} x {cfg.ranks_per_node}"
    size = "as nvidia-smi reports" if plan.gpu in GPU_MEMORY else "as given"
    shared = plan.colocated and plan.engine is not None
    where = "a training GPU that an engine replica shares" if shared else "any training GPU"
    rows = [
        (
            "gpu",
            human_bytes(plan.gpu_bytes),
            f"cluster.gpu={cfg.cluster.gpu}, {size}",
        ),
        (
            "training GPU",
            plural(d.world_size, "rank"),
            f"{where}; {ranks} (cluster.nodes x ranks per node)",
        ),
        *_memory_rows(plan.training_gpu),
    ]
    if plan.generation_gpu:
        rows.append(
            (
                "generation GPU",
                plural(cfg.rollout.gpus, "GPU"),
                f"per node, kept for vLLM (rollout.gpus): {replicas_per_node(cfg)} replica(s) "
                f"x {cfg.rollout.tensor_parallel_size} GPU(s) each "
                "(rollout.tensor_parallel_size)",
            )
        )
        rows.extend(_memory_rows(plan.generation_gpu))
    return rows + _peak_rows(plan)


def _memory_rows(rows: list[MemoryRow]) -> list[Row]:
    return [(f"  {r.what}", human_bytes(r.bytes), r.how) for r in rows]


def _peak_rows(plan: GpuPlan) -> list[Row]:
    training = "the training GPU's live bytes: context, held rows, the larger working row"
    if not plan.colocated:
        generation = "the generation GPU: " + ("the engine's claim" if plan.engine else "its rows")
    elif plan.hf is not None:
        generation = "context, held rows, the hf engine's KV cache and generation tensors"
    elif plan.engine is not None:
        training += "; the vLLM engine sleeps meanwhile"
        generation = "engine claim + CUDA context, states and reference (no activations)"
    else:
        generation = "context and the trainer's held rows"
    if any(r.what == "critic pass" for r in plan.training_gpu):
        training += "; the policy's and the critic's passes run apart, the larger counts"
    spare = plan.gpu_bytes - plan.peak
    verdict = f"{human_bytes(spare)} to spare" if spare >= 0 else f"{human_bytes(-spare)} over"
    rows = [
        ("peak: training phase", human_bytes(plan.training_phase), training),
        ("peak: generation phase", human_bytes(plan.generation_phase), generation),
        (
            "  fragmentation",
            human_bytes(plan.fragmentation),
            f"{FRAGMENTATION:.0%} of the trainer process's peak allocated "
            f"({human_bytes(plan.trainer_peak)}), held by its caching allocator: a "
            "calibration against measured runs (plan/allocator.py)",
        ),
    ]
    if plan.cached_kv:
        rows.append(
            (
                "  cached KV blocks",
                human_bytes(plan.cached_kv),
                "the hf engine's KV tensors grow a position at a time; the allocator keeps a "
                "segment for each 2 MiB size class from 10 MiB on (plan/allocator.py)",
            )
        )
    cached = ", less the cached KV blocks, which the allocator gives back" if plan.cached_kv else ""
    return [
        *rows,
        (
            "peak reserved (estimate)",
            human_bytes(plan.reserved),
            f"the trainer process's peak allocated {human_bytes(plan.trainer_peak)} + "
            "fragmentation" + (" + cached KV blocks" if plan.cached_kv else "") + ": compare "
            "torch.cuda.max_memory_reserved (the CUDA context comes on top)",
        ),
        (
            "memory check",
            "fits" if plan.fits else "does not fit",
            f"peak {human_bytes(plan.peak)} (the larger phase + fragmentation{cached}) of "
            f"{human_bytes(plan.gpu_bytes)} (cluster.gpu): {verdict}",
        ),
    ]
