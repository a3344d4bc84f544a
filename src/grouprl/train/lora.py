"""LoRA on the policy (through PEFT): only low-rank adapters train; the base stays frozen.

    q_proj(x) = W x + (alpha / r) B A x        W frozen; A (r x in), B (out x r) train

The adapters are injected into the policy model in place (``add_lora``), so the scorer,
FSDP2 sharding and checkpoints see one model whose parameters include
``...q_proj.base_layer.weight`` and ``...q_proj.lora_A.default.weight``. Two things
follow:

- the reference policy of the KL term is the same model with the adapters off
  (``adapters_off``): no second copy of the weights;
- the engine gets merged weights under the base model's names (``merged_weights``:
  W + (alpha / r) B A), so it serves the policy without knowing about LoRA. A
  checkpoint's export merges the same way.
"""

from __future__ import annotations

import re
from contextlib import contextmanager

import torch
from torch import Tensor

from grouprl.config.schema import LoraConfig

ADAPTER = "default"
_LORA_KEY = re.compile(rf"^(?P<prefix>.+)\.lora_(?P<which>[AB])\.{ADAPTER}\.weight$")


def add_lora(model: torch.nn.Module, cfg: LoraConfig) -> torch.nn.Module:
    """Injects adapters into ``model`` in place and freezes everything else; returns
    ``model`` (its class and forward unchanged)."""
    from peft import LoraConfig as PeftLoraConfig
    from peft import inject_adapter_in_model

    targets = cfg.target_modules
    config = PeftLoraConfig(
        r=cfg.rank,
        lora_alpha=cfg.alpha,
        lora_dropout=cfg.dropout,
        target_modules=targets if isinstance(targets, str) else list(targets),
        bias="none",
    )
    model.requires_grad_(False)
    inject_adapter_in_model(config, model, adapter_name=ADAPTER)
    for name, param in model.named_parameters():
        param.requires_grad_(".lora_" in name)
    model.lora_scaling = cfg.alpha / cfg.rank
    return model


def has_lora(model: torch.nn.Module) -> bool:
    return hasattr(model, "lora_scaling")


@contextmanager
def adapters_off(model: torch.nn.Module):
    """The base model's forward inside (the reference policy)."""
    from peft.tuners.lora import LoraLayer

    layers = [m for m in model.modules() if isinstance(m, LoraLayer)]
    for layer in layers:
        layer.enable_adapters(False)
    try:
        yield
    finally:
        for layer in layers:
            layer.enable_adapters(True)


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
            delta = (pair["B"].float() @ pair["A"].float()) * scaling
            value = (value.float() + delta).to(value.dtype)
        out[base] = value
    return out
