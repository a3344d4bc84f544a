"""Parameter counts and memory of the models a run loads, from config.json alone.

``grouprl plan`` shows them before anything is downloaded or loaded, so this
module imports no torch or transformers: it counts the weights of a
Qwen2/Llama-style decoder from its ``config.json``::

    embeddings    V x H
    per layer     q (H x heads*D), k and v (H x kv_heads*D each), o (heads*D x H),
                  gate, up, down (3 x H x I), two RMSNorms (2 x H), biases where present
    final norm    H
    lm_head       V x H unless tie_word_embeddings

(V vocab, H hidden, I intermediate, L layers, D head_dim = H / heads unless given,
q = heads x D, kv = kv_heads x D.) Rotary embeddings have no weights. Other architectures
come out approximate or unknown. The per-token activation and KV cache sizes that
``plan/gpu_memory.py`` plans with live here too.

Activations: what one decoder layer saves for backward per token (T the tokens per
sample), counted from transformers' Qwen2/Llama code with sdpa attention. Two precisions
(``Precision``): ``autocast``, bf16 autocast over float32 weights (one rank), and
``fsdp2``, FSDP2's mixed precision (a sharded rank: each layer gathered in bf16, so the
residual stream is bf16 too)::

    autocast: 26H + 8q + 8I + 2T
    16H   float32: the residual stream stays float32 (the embeddings are float32 and the
          bf16 outputs are added to it): the layer's input, the residual after attention,
          and each RMSNorm's normalized float32 copy
    10H   bf16 casts of the two RMSNorm outputs, one per q, k, v, gate and up projection
          (autocast caches casts of weights only, so each projection casts its input)
    fsdp2: 16H + 8q + 8I + 2T
    16H   per RMSNorm: the float32 upcast of its bf16 input (4H), its bf16 normalized
          copy (2H) and its bf16 output (2H), which q, k and v (gate and up) share
    both
     8q   sdpa's bf16 q, k and v (KV heads repeated to q's width: transformers repeats
          them when there is a padding mask) and its output, which o_proj reads in place
     8I   bf16 gate, SiLU and up outputs and their product
     2T   the bf16 attention bias row of a padded micro-batch

Once per token (not per layer), around the head: the final norm's input and normalized
copy, its output and the scored positions the logprob chunks read: 16H under autocast
(all float32), 10H under fsdp2 (the float32 upcast, then bf16). With activation
checkpointing a layer keeps only its input: 4H (float32) under autocast, 2H under fsdp2.
The saved tensors were listed with torch's saved-tensor hooks on CPU (sdpa's as CUDA's
kernels keep them; the fsdp2 counts on a bf16 model, which computes as FSDP2's gathered
layers do), and with the other rows of ``plan/trainer_memory.py`` the autocast counts
come within 1% of the peak allocated bytes measured on an H100 for Qwen2.5-0.5B and -1.5B
shapes (issue 18; 315-token samples). The fsdp2 counts are not yet measured on a GPU.
``model.dtype=float32`` on a GPU trains without autocast, whose larger activations this
does not model (it is planned as ``autocast``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from grouprl.assets import BUILTIN_PREFIX, ModelPathError, resolve_model_path
from grouprl.plan.known_models import known_config

# bytes per parameter while training with AdamW in float32: weights, grads, two moments
ADAMW_FP32_BYTES = 4 + 4 + 2 * 4
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
FP32_BYTES = 4
Precision = Literal["autocast", "fsdp2"]  # the module docstring says what each saves
LAYER_BYTES_PER_H: dict[Precision, int] = {"autocast": 26, "fsdp2": 16}
# the final norm's input (upcast) and normalized copy, its output, the scored positions
HEAD_BYTES_PER_H: dict[Precision, int] = {"autocast": 16, "fsdp2": 10}
# a checkpointed layer's input: the residual stream's dtype
STREAM_BYTES: dict[Precision, int] = {"autocast": 4, "fsdp2": 2}
KNOWN_CONFIGS_WHERE = "grouprl's table of known configs"


class SizeUnknown(Exception):
    """The parameter count cannot be estimated without loading the model; str() says why."""


@dataclass(frozen=True)
class MemoryRow:
    what: str
    bytes: int
    how: str  # the arithmetic, naming the config keys


@dataclass(frozen=True)
class ParamCount:
    decoder: int  # embeddings + layers + final norm
    lm_head: int  # 0 when tied to the embeddings
    hidden_size: int
    layer_linears: int  # one decoder layer's linear weights and biases (autocast casts)

    @property
    def causal_lm(self) -> int:
        return self.decoder + self.lm_head

    @property
    def value_model(self) -> int:
        """The critic: the decoder plus a Linear(H, 1) head with bias (no lm_head)."""
        return self.decoder + self.hidden_size + 1


def model_config(path: str, *, revision: str | None = None) -> tuple[dict[str, Any], str]:
    """``config.json`` of ``path`` (``builtin:NAME``, a directory, or a downloaded hub
    model) and where it was read. A hub model that is not downloaded falls back to
    ``plan/known_models.py``; ``SizeUnknown`` when it is not listed there either."""
    try:
        resolved = resolve_model_path(path)
    except ModelPathError as err:
        raise SizeUnknown(f"unknown ({err})") from None
    local = Path(resolved).expanduser() / "config.json"
    if local.is_file():
        where = f"{path}/config.json" if path.startswith(BUILTIN_PREFIX) else str(local)
        return json.loads(local.read_text()), where
    if resolved.startswith((".", "/", "~")):
        raise SizeUnknown(f"unknown (no {local})")
    cached = _hub_cache_config(resolved, revision=revision)
    if cached is not None:
        return json.loads(cached.read_text()), "config.json in the Hugging Face cache"
    known = known_config(resolved)
    if known is None:
        raise SizeUnknown("unknown (hub model, not downloaded)")
    return known, KNOWN_CONFIGS_WHERE


def _hub_cache_config(name: str, *, revision: str | None) -> Path | None:
    """The cached snapshot's config.json, found the way huggingface_hub lays it out."""
    if name.count("/") != 1:
        return None
    home = os.environ.get("HF_HOME", "~/.cache/huggingface")
    cache = Path(os.environ.get("HF_HUB_CACHE", f"{home}/hub")).expanduser()
    repo = cache / ("models--" + name.replace("/", "--"))
    ref = repo / "refs" / (revision or "main")
    commit = ref.read_text().strip() if ref.is_file() else revision
    if commit is None:
        return None
    config = repo / "snapshots" / commit / "config.json"
    return config if config.is_file() else None


@dataclass(frozen=True)
class DecoderShape:
    """The sizes of a Qwen2/Llama-style decoder that its weights and activations follow."""

    vocab: int
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int

    @property
    def q_out(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_out(self) -> int:
        return self.kv_heads * self.head_dim


def decoder_shape(config: dict[str, Any]) -> DecoderShape:
    """The sizes in ``config.json``; ``SizeUnknown`` if one is missing."""
    config = config.get("text_config", config)  # multimodal configs nest the decoder
    needed = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers")
    missing = [k for k in (*needed, "num_attention_heads") if not config.get(k)]
    if missing:
        raise SizeUnknown(f"unknown (config.json has no {', '.join(missing)})")
    vocab, hidden, inter, layers = (int(config[k]) for k in needed)
    heads = int(config["num_attention_heads"])
    return DecoderShape(
        vocab=vocab,
        hidden=hidden,
        intermediate=inter,
        layers=layers,
        heads=heads,
        kv_heads=int(config.get("num_key_value_heads") or heads),
        head_dim=int(config.get("head_dim") or hidden // heads),
    )


def estimate_params(config: dict[str, Any]) -> ParamCount:
    """Weights of a Qwen2/Llama/Qwen3-style decoder; ``SizeUnknown`` if a size is missing."""
    shape = decoder_shape(config)
    config = config.get("text_config", config)
    vocab, hidden, inter, layers = shape.vocab, shape.hidden, shape.intermediate, shape.layers
    head_dim, q_out, kv_out = shape.head_dim, shape.q_out, shape.kv_out
    model_type = config.get("model_type", "")
    attention_bias = bool(config.get("attention_bias", False))
    qkv_bias = model_type == "qwen2" or attention_bias  # Qwen2: q/k/v biases, o none
    attention = hidden * q_out + 2 * hidden * kv_out + q_out * hidden
    attention += (q_out + 2 * kv_out) * qkv_bias + hidden * attention_bias
    qk_norms = 2 * head_dim * (model_type == "qwen3")  # Qwen3's q_norm and k_norm
    mlp = 3 * hidden * inter + (2 * inter + hidden) * bool(config.get("mlp_bias", False))
    per_layer = attention + qk_norms + mlp + 2 * hidden
    decoder = vocab * hidden + layers * per_layer + hidden
    tied = bool(config.get("tie_word_embeddings", False))  # these families default to untied
    return ParamCount(
        decoder=decoder,
        lm_head=0 if tied else vocab * hidden,
        hidden_size=hidden,
        layer_linears=attention + mlp,
    )


def layer_activation_bytes(
    shape: DecoderShape, *, seq_len: int, precision: Precision = "autocast"
) -> int:
    """Bytes one decoder layer saves for backward per token (the module docstring counts
    them): 26H (autocast) or 16H (fsdp2) + 8q + 8I + 2T, T = ``seq_len`` tokens per sample."""
    per_h = LAYER_BYTES_PER_H[precision]
    return per_h * shape.hidden + 8 * shape.q_out + 8 * shape.intermediate + 2 * seq_len


def activation_bytes(
    shape: DecoderShape,
    *,
    tokens: int,
    seq_len: int,
    checkpointing: bool,
    precision: Precision = "autocast",
) -> int:
    """Activations of one forward/backward over ``tokens`` tokens of ``seq_len``-token
    samples: every layer's, or with checkpointing each layer's input (4H float32 under
    autocast, 2H bf16 under fsdp2) and one layer recomputed; plus the head's 16H (10H)."""
    per_layer = layer_activation_bytes(shape, seq_len=seq_len, precision=precision)
    head = HEAD_BYTES_PER_H[precision] * shape.hidden
    if checkpointing:
        kept = shape.layers * STREAM_BYTES[precision] * shape.hidden
        return tokens * (kept + per_layer + head)
    return tokens * (shape.layers * per_layer + head)


def kv_bytes_per_token(shape: DecoderShape, *, tensor_parallel: int, dtype_bytes: int) -> int:
    """KV cache per token on one of ``tensor_parallel`` GPUs: K and V of every layer (vLLM
    replicates KV heads when there are fewer than GPUs)."""
    kv_heads = max(1, shape.kv_heads // tensor_parallel)
    return 2 * shape.layers * kv_heads * shape.head_dim * dtype_bytes


def human_bytes(n: float) -> str:
    """``1.23 MiB``: three significant digits in binary units."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1000 or unit == "GiB":
            break
        n /= 1024
    if unit == "B":
        return f"{int(n)} B"
    return f"{n:.3g} {unit}" if n < 1000 else f"{n:,.0f} {unit}"


def human_count(n: int) -> str:
    """``1.23M``: a parameter count in three significant digits."""
    for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= scale:
            return f"{n / scale:.3g}{suffix}"
    return str(n)


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("s" if n != 1 else "")
