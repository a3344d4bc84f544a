"""LoRA weights by name: the adapter naming PEFT uses, and merging adapters into the base
weights. Pure tensor code, shared by training (the engine is pushed merged weights) and
checkpoint export (which merges the same way).

    merged W = W + scaling x B @ A        scaling = alpha / r
"""

from __future__ import annotations

import re

from torch import Tensor

ADAPTER = "default"
_LORA_KEY = re.compile(rf"^(?P<prefix>.+)\.lora_(?P<which>[AB])\.{ADAPTER}\.weight$")


def adapter_prefix(name: str) -> tuple[str, str] | None:
    """``("a.q_proj", "A")`` for ``a.q_proj.lora_A.default.weight``; None for a name that
    is not an adapter's."""
    match = _LORA_KEY.match(name)
    return None if match is None else (match["prefix"], match["which"])


def merge_adapter(base: Tensor, a: Tensor, b: Tensor, *, scaling: float) -> Tensor:
    """``base + scaling x b @ a`` computed in float32, in ``base``'s dtype."""
    delta = (b.float() @ a.float()) * scaling
    return (base.float() + delta).to(base.dtype)


def merged_weights(state: dict[str, Tensor], *, scaling: float) -> dict[str, Tensor]:
    """``state`` (LoRA names) as the base model's weights: each adapted module's
    ``base_layer.weight`` plus ``scaling x B @ A`` under the module's own name; other
    entries renamed from ``...base_layer.*`` to ``...*``; the adapters themselves dropped.
    A state without adapters comes back as it is."""
    adapters: dict[str, dict[str, Tensor]] = {}
    for name, value in state.items():
        if match := _LORA_KEY.match(name):
            adapters.setdefault(match["prefix"], {})[match["which"]] = value
    if not adapters:
        return state
    out = {}
    for name, value in state.items():
        if ".lora_" in name:
            continue
        base = name.replace(".base_layer.", ".")
        prefix = name.removesuffix(".base_layer.weight")
        if prefix != name and prefix in adapters:
            pair = adapters[prefix]
            value = merge_adapter(value, pair["A"], pair["B"], scaling=scaling)
        out[base] = value
    return out
