"""config.json facts of popular hub models, for ``grouprl plan`` before any download.

``plan/memory.py`` reads a model's ``config.json`` from disk; a hub model that is
not downloaded yet falls back to this table, so its size and memory plan are known
without hub access. The values are copied from each model's public config.json
(only the fields that sizes and memory depend on); "-Instruct" variants share their
base model's shapes, so names are looked up with or without that suffix.
"""

from __future__ import annotations

from typing import Any

INSTRUCT_SUFFIX = "-instruct"


def _shapes(
    model_type: str,
    vocab: int,
    hidden: int,
    intermediate: int,
    layers: int,
    heads: int,
    kv_heads: int,
    *,
    tied: bool,
) -> dict[str, Any]:
    """One model's config.json facts; positional, so that the table below reads as columns
    (vocab, hidden, intermediate, layers, heads, kv heads)."""
    return {
        "model_type": model_type,
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "tie_word_embeddings": tied,
    }


LLAMA_70B = _shapes("llama", 128256, 8192, 28672, 80, 64, 8, tied=False)

# keys: lower-case hub names without "-instruct"
KNOWN_CONFIGS: dict[str, dict[str, Any]] = {
    "qwen/qwen2.5-0.5b": _shapes("qwen2", 151936, 896, 4864, 24, 14, 2, tied=True),
    "qwen/qwen2.5-1.5b": _shapes("qwen2", 151936, 1536, 8960, 28, 12, 2, tied=True),
    "qwen/qwen2.5-3b": _shapes("qwen2", 151936, 2048, 11008, 36, 16, 2, tied=True),
    "qwen/qwen2.5-7b": _shapes("qwen2", 152064, 3584, 18944, 28, 28, 4, tied=False),
    "qwen/qwen2.5-14b": _shapes("qwen2", 152064, 5120, 13824, 48, 40, 8, tied=False),
    "qwen/qwen2.5-32b": _shapes("qwen2", 152064, 5120, 27648, 64, 40, 8, tied=False),
    "qwen/qwen2.5-72b": _shapes("qwen2", 152064, 8192, 29568, 80, 64, 8, tied=False),
    "qwen/qwen2.5-coder-1.5b": _shapes("qwen2", 151936, 1536, 8960, 28, 12, 2, tied=True),
    "qwen/qwen2.5-coder-7b": _shapes("qwen2", 152064, 3584, 18944, 28, 28, 4, tied=False),
    "meta-llama/llama-3.1-8b": _shapes("llama", 128256, 4096, 14336, 32, 32, 8, tied=False),
    "meta-llama/llama-3.1-70b": LLAMA_70B,
    "meta-llama/llama-3.3-70b": LLAMA_70B,
}


def known_config(name: str) -> dict[str, Any] | None:
    """A copy of the table's config.json facts for hub model ``name`` (any case, with or
    without "-Instruct"), or None when the table does not list it."""
    key = name.strip().lower()
    key = key.removesuffix(INSTRUCT_SUFFIX)
    found = KNOWN_CONFIGS.get(key)
    return dict(found) if found is not None else None
