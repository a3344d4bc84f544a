"""The ``hf`` rollout engine's share of a GPU (``engines/hf_engine.py``), estimated from
config.json and the run config (no torch); part of ``grouprl plan``'s memory per GPU.

R rows per generate call (a step's samples per replica, or the held-out prompts, greedy:
at most ``HF_BATCH_ROWS``), T max tokens per sample, P0 = data.max_prompt_tokens::

    weights        P x 2               its own copy in model.dtype (bf16 for auto); it is
                                       not released while the policy trains
    KV cache       R x T x 2 (K, V) x L x kv_heads x head_dim x 2     transformers' cache,
                                       grown by torch.cat one position per step
    generation     the larger of the prefill's MLP, R x P0 x 6I (SiLU and up outputs and
                   their product, bf16), and one sampling step, R x V x 22 (bf16 logits,
                   then float32 logits, tempered logits, probabilities, exponential draws
                   and their stack; + 25 with rollout.top_k or rollout.top_p: the sort's
                   values and int64 indices, the cumulative probabilities, the scatter)
    cached blocks  the KV tensors' old sizes the allocator keeps (``plan/allocator.py``)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from grouprl.config.checks import Derived
from grouprl.config.schema import RunConfig
from grouprl.plan.allocator import left_behind
from grouprl.plan.engine_memory import engine_dtype
from grouprl.plan.memory import (
    MemoryRow,
    decoder_shape,
    estimate_params,
    human_count,
    kv_bytes_per_token,
)

HF_BATCH_ROWS = 256  # HFEngine's max_batch_rows: rows per forward pass
SAMPLING_BYTES_PER_VOCAB = 2 + 5 * 4  # bf16 logits; 5 float32 tensors (module docstring)
SORTING_BYTES_PER_VOCAB = 4 + 8 + 4 + 4 + 1 + 4  # sorted, indices, softmax, cumsum, mask, out


@dataclass(frozen=True)
class HfEngine:
    """One hf engine replica: ``weights`` held throughout, ``kv_cache`` + ``generation``
    while it generates, ``cached`` left in its allocator afterwards."""

    weights: MemoryRow
    kv_cache: MemoryRow
    generation: MemoryRow
    cached: MemoryRow

    @property
    def generating(self) -> int:
        return self.kv_cache.bytes + self.generation.bytes


def hf_rows_per_call(cfg: RunConfig, derived: Derived) -> int:
    """Rows of the largest generate call: a step's samples or the held-out prompts (one
    greedy sample each), split over the replicas, at most ``HF_BATCH_ROWS``."""
    rows = derived.samples_per_step
    if derived.eval_rows is not None:
        rows = max(rows, derived.eval_rows)
    return min(HF_BATCH_ROWS, math.ceil(rows / cfg.rollout_replicas))


def hf_plan(cfg: RunConfig, derived: Derived, *, config: dict[str, Any]) -> HfEngine:
    """One replica's rows; ``config`` is the policy's config.json."""
    shape, params = decoder_shape(config), estimate_params(config).causal_lm
    size, dtype = engine_dtype(cfg)
    rows, tokens = hf_rows_per_call(cfg, derived), derived.max_tokens_per_sample
    prompt = min(cfg.data.max_prompt_tokens, tokens)
    per_token = kv_bytes_per_token(shape, tensor_parallel=1, dtype_bytes=size)
    per_vocab = SAMPLING_BYTES_PER_VOCAB
    sorting = cfg.rollout.top_k > 0 or cfg.rollout.top_p < 1
    per_vocab += SORTING_BYTES_PER_VOCAB * sorting
    prefill = rows * prompt * 3 * shape.intermediate * size
    sampling = rows * shape.vocab * per_vocab
    calls = f"{rows} rows per generate call (samples or held-out prompts per replica, <= 256)"
    # each of the 2L cache tensors grows by rows x kv_heads x head_dim per position
    step = rows * shape.kv_heads * shape.head_dim * size
    cached = 2 * shape.layers * left_behind(bytes_per_step=step, first=prompt, last=tokens)
    return HfEngine(
        weights=MemoryRow(
            "hf engine weights",
            params * size,
            f"rollout.engine=hf: its own copy, {human_count(params)} params x {size} bytes "
            f"({dtype}), kept on the GPU while the policy trains",
        ),
        kv_cache=MemoryRow(
            "hf KV cache",
            rows * tokens * per_token,
            f"{calls} x {tokens:,} tokens x {per_token:,} bytes (2 x {shape.layers} layers x "
            f"{shape.kv_heads} KV heads x {shape.head_dim} x {size} bytes); while generating",
        ),
        generation=MemoryRow(
            "hf generation",
            max(prefill, sampling),
            f"the larger of the prefill's MLP ({rows} rows x {prompt} prompt tokens x 3 x "
            f"{shape.intermediate:,} x {size} bytes) and a sampling step ({rows} rows x "
            f"{shape.vocab:,} vocab x {per_vocab} bytes"
            + (": rollout.top_k/top_p sort the vocabulary" if sorting else "")
            + ")",
        ),
        cached=MemoryRow(
            "cached KV blocks",
            cached,
            f"the allocator keeps each size the {2 * shape.layers} K and V tensors grew "
            f"through from 10 MiB on (2 MiB classes, {prompt} -> {tokens} tokens x "
            f"{step:,} bytes); reserved, not allocated, and given back when memory runs out",
        ),
    )
