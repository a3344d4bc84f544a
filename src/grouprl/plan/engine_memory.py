"""The vLLM engine's share of a GPU, estimated from config.json and the run config (no
torch); part of ``grouprl plan``'s memory per GPU (``plan/gpu_memory.py``)::

    claim        rollout.gpu_memory_utilization x GPU size
    weights      P x 2 / rollout.tensor_parallel_size
    overhead     1 GiB (its CUDA context, activations, CUDA graphs)
    KV cache     claim - weights - overhead
    per token    2 (K and V) x L x max(1, kv_heads / tp) x head_dim x 2
    sequences    KV cache // (rollout.max_model_len x per token)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grouprl.config.errors import show
from grouprl.config.schema import RunConfig
from grouprl.plan.memory import (
    DTYPE_BYTES,
    MemoryRow,
    decoder_shape,
    estimate_params,
    human_bytes,
    human_count,
    kv_bytes_per_token,
)

GiB = 1024**3
ENGINE_OVERHEAD = GiB


@dataclass(frozen=True)
class Engine:
    """A vLLM engine replica's share of each of its ``rollout.tensor_parallel_size`` GPUs."""

    claim: int
    weights: int
    kv_cache: int  # claim - weights - overhead, at least 0
    kv_per_token: int  # on one GPU
    sequences: int  # full rollout.max_model_len sequences the KV cache holds at once
    rows: list[MemoryRow]


def engine_dtype(cfg: RunConfig) -> tuple[int, str]:
    """Bytes per weight on GPU outside training (the engine, the reference) and why."""
    if cfg.model.dtype == "auto":
        return 2, "bf16: model.dtype=auto on GPU"
    return DTYPE_BYTES[cfg.model.dtype], f"model.dtype={cfg.model.dtype}"


def engine_plan(cfg: RunConfig, *, config: dict[str, Any], gpu_bytes: int, gpu: str) -> Engine:
    r = cfg.rollout
    shape, params = decoder_shape(config), estimate_params(config).causal_lm
    size, dtype = engine_dtype(cfg)
    tp = r.tensor_parallel_size
    claim = int(r.gpu_memory_utilization * gpu_bytes)
    weights = params * size // tp
    kv_cache = max(0, claim - weights - ENGINE_OVERHEAD)
    kv_heads = max(1, shape.kv_heads // tp)  # vLLM replicates KV heads when tp > kv_heads
    per_token = kv_bytes_per_token(shape, tensor_parallel=tp, dtype_bytes=size)
    sequences = kv_cache // (r.max_model_len * per_token)
    where = (
        "beside a training rank on each of its GPUs (rollout.gpus=0: colocated)"
        if r.gpus == 0
        else f"on its own GPUs (rollout.gpus={r.gpus}: dedicated)"
    )
    rows = [
        MemoryRow(
            "engine claim",
            claim,
            f"rollout.gpu_memory_utilization={show(r.gpu_memory_utilization)} x "
            f"{human_bytes(gpu_bytes)} (cluster.gpu={gpu}), vLLM {where}",
        ),
        MemoryRow(
            "engine weights",
            weights,
            f"{human_count(params)} params x {size} bytes ({dtype}) / {tp} "
            "(rollout.tensor_parallel_size)",
        ),
        MemoryRow("engine overhead", ENGINE_OVERHEAD, "CUDA context, activations, CUDA graphs"),
        MemoryRow(
            "KV cache",
            kv_cache,
            f"the rest of the claim: {sequences:,} sequences of {r.max_model_len:,} tokens "
            f"(rollout.max_model_len) at {per_token:,} bytes per token (2 x {shape.layers} "
            f"layers x {kv_heads} KV heads x {shape.head_dim} x {size} bytes)",
        ),
    ]
    return Engine(claim, weights, kv_cache, per_token, sequences, rows)


def engine_problems(cfg: RunConfig, engine: Engine | None) -> list[str]:
    if engine is None:
        return []
    r = cfg.rollout
    if engine.weights > engine.claim:
        return [
            f"the rollout engine's weights alone need {human_bytes(engine.weights)} per GPU "
            f"(rollout.tensor_parallel_size={r.tensor_parallel_size}), more than its share "
            f"rollout.gpu_memory_utilization={show(r.gpu_memory_utilization)} of the GPU = "
            f"{human_bytes(engine.claim)}: raise rollout.tensor_parallel_size or "
            "rollout.gpu_memory_utilization."
        ]
    needed = r.max_model_len * engine.kv_per_token
    if engine.kv_cache < needed:
        return [
            f"rollout.max_model_len={r.max_model_len} needs {human_bytes(needed)} of KV cache "
            f"per sequence but the engine has {human_bytes(engine.kv_cache)} left after its "
            f"weights ({human_bytes(engine.weights)}) and ~1 GiB overhead within "
            f"rollout.gpu_memory_utilization={show(r.gpu_memory_utilization)} of the GPU: "
            "raise rollout.gpu_memory_utilization, lower rollout.max_model_len, or raise "
            "rollout.tensor_parallel_size."
        ]
    return []
