"""The models section of ``grouprl plan``: what each model costs before it loads.

Each model's weights with its optimizer state, estimated from ``config.json``
(``config/memory.py``); activations and the rollout engine come on top. No torch.
"""

from __future__ import annotations

from grouprl.config.checks import Derived
from grouprl.config.errors import show
from grouprl.config.memory import (
    ADAMW_FP32_BYTES,
    DTYPE_BYTES,
    ParamCount,
    SizeUnknown,
    estimate_params,
    human_bytes,
    human_count,
    model_config,
)
from grouprl.config.schema import CriticConfig, RunConfig

Row = tuple[str, str, str]  # quantity, value, how it follows from the config


def model_rows(cfg: RunConfig, d: Derived) -> list[Row]:
    """Each model's weights with its optimizer state; activations and the engine come on top."""
    adamw = [(ADAMW_FP32_BYTES, "float32 weights + grads + 2 AdamW moments")]
    policy, where = _param_count(cfg.model.path, revision=cfg.model.revision)
    count = policy.causal_lm if policy else None
    rows = [("policy", "yes", f"{cfg.model.path}, trained: " + _bytes_text(count, where, adamw))]
    known = policy is not None
    totals = [(count or 0) * ADAMW_FP32_BYTES]
    if d.reference_model:
        options = _reference_dtypes(cfg)
        how = "frozen copy, because algo.beta > 0: "
        rows.append(("reference model", "yes", how + _bytes_text(count, where, options)))
        totals = [totals[0] + (count or 0) * b for b, _ in options]
    else:
        rows.append(("reference model", "no", "algo.beta=0: no frozen copy loaded"))
    if cfg.critic is not None:
        revision = cfg.model.revision if cfg.critic.path == cfg.model.path else None
        critic, critic_where = _param_count(cfg.critic.path, revision=revision)
        value_count = critic.value_model if critic else None
        memory = _bytes_text(value_count, critic_where, adamw)
        rows.append(("critic", "yes", _critic_text(cfg.critic, memory)))
        known = known and critic is not None
        totals = [t + (value_count or 0) * ADAMW_FP32_BYTES for t in totals]
    else:
        rows.append(("critic", "no", "critic=null: the advantages need no value model"))
    if known:
        per_device = " (CPU / GPU)" if len(totals) > 1 else ""
        rows.append(
            (
                "model memory",
                " / ".join(human_bytes(t) for t in totals),
                f"the sum of the above{per_device}; activations, logprob chunks and the "
                "rollout engine's own weights and KV cache come on top",
            )
        )
    return rows


def _param_count(path: str, *, revision: str | None) -> tuple[ParamCount | None, str]:
    try:
        config, where = model_config(path, revision=revision)
        return estimate_params(config), where
    except SizeUnknown as err:
        return None, str(err)


def _reference_dtypes(cfg: RunConfig) -> list[tuple[int, str]]:
    """Bytes per weight of the reference copy, which loads in the engine dtype."""
    dtype, device = cfg.model.dtype, cfg.train.device
    if dtype != "auto":
        return [(DTYPE_BYTES[dtype], f"model.dtype={dtype}")]
    cpu, gpu = (4, "float32 on CPU"), (2, "bf16 on GPU")
    return {"cpu": [cpu], "cuda": [gpu]}.get(device, [cpu, gpu])


def _bytes_text(params: int | None, where: str, options: list[tuple[int, str]]) -> str:
    """``1.23M params (from ...) x 4 bytes (float32 on CPU) / 2 (bf16 on GPU) = 4.71 MiB /
    2.35 MiB``; with an unknown count, ``where`` says why."""
    sizes = " / ".join(
        f"{b} bytes ({label})" if i == 0 else f"{b} ({label})"
        for i, (b, label) in enumerate(options)
    )
    if params is None:
        return f"parameters {where}; {sizes} per parameter"
    memory = " / ".join(human_bytes(params * b) for b, _ in options)
    return f"{human_count(params)} params (from {where}) x {sizes} = {memory}"


def _critic_text(critic: CriticConfig, memory: str) -> str:
    clip = (
        f"value clip {show(critic.value_clip)} (critic.value_clip)"
        if critic.value_clip is not None
        else "no value clip (critic.value_clip=null)"
    )
    warmup = (
        f"{critic.warmup_steps} warmup steps where only the critic learns (critic.warmup_steps)"
        if critic.warmup_steps
        else "no warmup (critic.warmup_steps=0)"
    )
    return (
        f"{critic.path} with a scalar value head, lr {critic.lr:g} (AdamW, constant), "
        f"{clip}, {warmup}; {memory}"
    )
