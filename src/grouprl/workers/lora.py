"""LoRA on the policy (through PEFT): only low-rank adapters train; the base stays frozen.

    q_proj(x) = W x + (alpha / r) B A x        W frozen; A (r x in), B (out x r) train

The adapters are injected into the policy model in place (``add_lora``), so the scorer,
FSDP2 sharding and checkpoints see one model whose parameters include
``...q_proj.base_layer.weight`` and ``...q_proj.lora_A.default.weight``. Two things
follow:

- the reference policy of the KL term is the same model with the adapters off
  (``adapters_off``): no second copy of the weights;
- the engine gets merged weights under the base model's names (``lora_weights.merged_weights``:
  W + (alpha / r) B A), so it serves the policy without knowing about LoRA. A
  checkpoint's export merges the same way.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch

from grouprl.config.train import LoraConfig
from grouprl.lora_weights import ADAPTER

if TYPE_CHECKING:
    from transformers import PreTrainedModel


def add_lora(model: PreTrainedModel, cfg: LoraConfig) -> PreTrainedModel:
    """Injects adapters into ``model`` in place and freezes everything else; returns
    ``model`` (its class and forward unchanged)."""
    from peft import LoraConfig as PeftLoraConfig
    from peft import inject_adapter_in_model

    targets = cfg.target_modules
    config = PeftLoraConfig(
        r=cfg.rank,
        # peft annotates lora_alpha as int, but only divides it by r: a float is fine
        lora_alpha=cfg.alpha,  # pyright: ignore[reportArgumentType]
        lora_dropout=cfg.dropout,
        target_modules=targets if isinstance(targets, str) else list(targets),
        bias="none",
    )
    model.requires_grad_(False)
    inject_adapter_in_model(config, model, adapter_name=ADAPTER)
    for name, param in model.named_parameters():
        param.requires_grad_(".lora_" in name)
    # a plain attribute (nn.Module.__setattr__ is annotated for tensors and modules only)
    model.lora_scaling = cfg.alpha / cfg.rank  # pyright: ignore[reportArgumentType]
    return model


def lora_scaling(model: torch.nn.Module) -> float:
    """``alpha / rank`` of the adapters ``add_lora`` put into ``model``."""
    return float(model.__dict__["lora_scaling"])


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
