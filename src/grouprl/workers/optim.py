"""AdamW and the learning-rate schedule (warmup, then constant or cosine).

The schedule counts training steps (one per batch of prompts), not optimizer
steps, so ``warmup_steps`` means the same whatever the mini-batch size.

Weight decay follows transformers' ``Trainer.get_decay_parameter_names`` (so TRL's):
biases and the weights of norm layers (LayerNorm, RMSNorm) are not decayed; every other
trained parameter is, embeddings and LoRA adapters included. verl decays every parameter.
"""

from __future__ import annotations

import math
import re

import torch

from grouprl.config.train import CriticConfig, TrainConfig

NO_DECAY_NAMES = [
    re.compile(p)
    for p in (r"bias", r"layernorm", r"rmsnorm", r"(?:^|\.)norm(?:$|\.)", r"_norm(?:$|\.)")
]
"""transformers' patterns (searched in the lower-cased parameter name) for parameters
kept out of weight decay: biases and norm weights (``input_layernorm.weight``,
``model.norm.weight``, ``q_norm.weight``)."""
NO_DECAY_MODULES = (torch.nn.LayerNorm, torch.nn.RMSNorm)


def decay_param_groups(model: torch.nn.Module, *, weight_decay: float) -> list[dict]:
    """AdamW parameter groups of ``model``'s trained parameters: the decayed ones, then
    the biases and norm weights with no decay. One group, in ``model.parameters()``
    order, when ``weight_decay`` is 0 or nothing is exempt. Parameter names are the
    module's own, so FSDP2 (DTensor) and PEFT-wrapped models group the same way."""
    in_norms = {
        id(param)
        for module in model.modules()
        if isinstance(module, NO_DECAY_MODULES)
        for param in module.parameters(recurse=False)
    }
    trained = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    decay, keep = [], []
    for name, param in trained:
        exempt = id(param) in in_norms or any(p.search(name.lower()) for p in NO_DECAY_NAMES)
        (keep if exempt else decay).append(param)
    if weight_decay == 0 or not keep:
        return [{"params": [p for _, p in trained], "weight_decay": weight_decay}]
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": keep, "weight_decay": 0.0},
    ]
    return [g for g in groups if g["params"]]


def make_optimizer(
    model: torch.nn.Module, cfg: TrainConfig | CriticConfig
) -> torch.optim.Optimizer:
    """AdamW with the weight decay above: the policy's (``train``) or the critic's."""
    groups = decay_param_groups(model, weight_decay=cfg.weight_decay)
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas)


def lr_factor(step: int, *, cfg: TrainConfig, total_steps: int) -> float:
    """Multiplier of ``cfg.lr`` for training step ``step`` (0-based)."""
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.lr_schedule == "constant":
        return 1.0
    decay_steps = max(1, total_steps - cfg.warmup_steps - 1)
    progress = min(1.0, (step - cfg.warmup_steps) / decay_steps)
    cosine = 0.5 * (1 + math.cos(math.pi * progress))
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * cosine


def make_scheduler(
    optimizer: torch.optim.Optimizer, cfg: TrainConfig, *, total_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step, cfg=cfg, total_steps=total_steps)
    )


def states_on_host(optimizer: torch.optim.Optimizer) -> None:
    """Keeps ``optimizer``'s state tensors (AdamW's two moments per parameter) in host
    memory except during ``optimizer.step()``: a hook brings them to each parameter's
    device before the step and moves them back after it, and again after a
    ``load_state_dict`` (which places them on the parameters' devices). The moments then
    take no GPU memory during forward/backward passes or while a colocated engine
    generates; each step moves them both ways once (``cluster.offload_optimizer``).
    Scalars (AdamW's ``step``) stay where the optimizer keeps them."""

    def move(opt: torch.optim.Optimizer, *, to_host: bool) -> None:
        for group in opt.param_groups:
            for param in group["params"]:
                state = opt.state.get(param, {})
                for key, value in state.items():
                    if torch.is_tensor(value) and value.dim() > 0:
                        device = torch.device("cpu") if to_host else param.device
                        state[key] = value.to(device, copy=True)

    optimizer.register_step_pre_hook(lambda opt, args, kwargs: move(opt, to_host=False))
    optimizer.register_step_post_hook(lambda opt, args, kwargs: move(opt, to_host=True))
    optimizer.register_load_state_dict_post_hook(lambda opt: move(opt, to_host=True))
