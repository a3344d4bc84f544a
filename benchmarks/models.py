"""Models of a few sizes for the benchmarks: the shipped tiny model, or random Qwen2s.

    "tiny" ──► src/grouprl/assets/tiny-arith (trained weights, 1.23M parameters)
    "25m"  ──► Qwen2, hidden 512, 8 layers, MLP 1408, 8/4 heads     (~24M, random)
    "0.5b" ──► Qwen2.5-0.5B's shape, hidden 896, 24 layers, MLP 4864,
               14/2 heads                                        (~360M, random)

Every model uses tiny-arith's tokenizer (vocabulary 397, its chat template), ties its
output head to its embeddings and is float32. The random ones are seeded
(``torch.manual_seed(SEED)`` before the init), so a size always gives the same
weights; only the arithmetic matters to the benchmarks, not what the model says.
``0.5b`` is Qwen2.5-0.5B's decoder with a 397-token vocabulary: its 136M embedding
parameters shrink to 0.36M, so it has ~358M non-embedding parameters, as the real one.
"""

from __future__ import annotations

import shutil
from pathlib import Path

SIZES = ("tiny", "25m", "0.5b")
SEED = 0
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")

SHAPES: dict[str, dict[str, int]] = {
    "25m": {
        "hidden_size": 512,
        "num_hidden_layers": 8,
        "intermediate_size": 1408,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
    },
    "0.5b": {
        "hidden_size": 896,
        "num_hidden_layers": 24,
        "intermediate_size": 4864,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
    },
}


def tiny_dir() -> Path:
    from grouprl.assets import resolve_model_path

    return Path(resolve_model_path("builtin:tiny-arith"))


def qwen2_config(size: str):
    """The ``Qwen2Config`` of a random size, with tiny-arith's vocabulary and token ids."""
    import json

    from transformers import Qwen2Config

    if size not in SHAPES:
        raise ValueError(f"size {size!r}: random sizes are {sorted(SHAPES)} (and 'tiny')")
    tiny = json.loads((tiny_dir() / "config.json").read_text())
    return Qwen2Config(
        vocab_size=tiny["vocab_size"],
        pad_token_id=tiny["pad_token_id"],
        bos_token_id=tiny["bos_token_id"],
        eos_token_id=tiny["eos_token_id"],
        rms_norm_eps=tiny["rms_norm_eps"],
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        dtype="float32",
        **SHAPES[size],
    )


def build_model(size: str):
    """The model of ``size`` in memory, float32 (no files written)."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2ForCausalLM

    if size == "tiny":
        return AutoModelForCausalLM.from_pretrained(tiny_dir(), dtype=torch.float32)
    config = qwen2_config(size)
    torch.manual_seed(SEED)
    return Qwen2ForCausalLM(config).float()


def make_model(size: str, out: Path) -> Path:
    """A model directory of ``size``: "tiny" returns the shipped directory (``out`` is
    not used); the others are written to ``out`` (created; safetensors, float32, with
    tiny-arith's tokenizer files) and ``out`` is returned."""
    if size not in SIZES:
        raise ValueError(f"size {size!r}: choose one of {list(SIZES)}")
    if size == "tiny":
        return tiny_dir()
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # as train.run does: no per-file bars on stderr
    out.mkdir(parents=True, exist_ok=True)
    build_model(size).save_pretrained(out)
    for name in TOKENIZER_FILES:
        shutil.copyfile(tiny_dir() / name, out / name)
    return out


def resolve_model(name: str, work: Path) -> Path:
    """``--model`` of a benchmark: a size (written under ``work`` when random),
    ``builtin:NAME``, or a model directory."""
    from grouprl.assets import resolve_model_path

    if name in SIZES:
        return make_model(name, work / f"model-{name}")
    path = Path(resolve_model_path(name))
    if not (path / "config.json").is_file():
        raise ValueError(f"no model directory at {path}; pass one of {list(SIZES)} or a path")
    return path


def parameter_count(model) -> int:
    """Parameters, a tied weight counted once."""
    return sum(p.numel() for p in model.parameters())
