"""The reward models of ``grouprl plan`` (``reward.functions`` entries named
``reward_model``, docs/reward-models.md): where each runs and what its copies weigh.

Each reward worker process (``reward.sandbox.workers``) loads its own copy, so the
memory is one copy times the workers, on the device its ``args.device`` names. Torch-free:
the size comes from the weights' files (``*.safetensors``, in the dtype they are stored
in) or, where those are not here, from ``config.json`` (``plan/memory.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grouprl.assets import ModelPathError, resolve_model_path
from grouprl.config.schema import RunConfig
from grouprl.plan.memory import SizeUnknown, estimate_params, human_bytes, human_count
from grouprl.plan.memory import model_config as read_config
from grouprl.plan.rows import Row

NAME = "reward_model"
"""The registered name (``rewards/reward_model.py``; the plan sits below rewards/)."""

TORCH_RSS_BYTES = 400 << 20
"""A worker's resident memory with torch and transformers imported and a tiny model
loaded (measured: 359 MB, torch 2.13 CPU wheel, transformers 5.19), against
``reward.sandbox.memory_mb``."""

WHERE = {
    "auto": "a GPU where the reward workers see one (CUDA_VISIBLE_DEVICES), else the CPU",
    "cuda": "a GPU (refused before the run on a machine without one)",
    "cpu": "the CPU",
}


def reward_model_rows(cfg: RunConfig) -> list[Row]:
    """One row per reward model: its path, device, copies and memory."""
    rows = []
    workers = cfg.reward.sandbox.workers
    for i, f in enumerate(cfg.reward.functions):
        if f.name != NAME:
            continue
        args: dict[str, Any] = dict(f.args)
        path, device = str(args.get("path", "")), str(args.get("device", "auto"))
        size = _size(path, on_gpu=device == "cuda")
        copies = f"{workers} cop{'y' if workers == 1 else 'ies'}, one per reward worker"
        text = (
            f"reward.functions.{i}: on {WHERE.get(device, device)} (args.device={device}); "
            f"{copies} (reward.sandbox.workers), each {size}; batches of "
            f"{args.get('batch_size', 32)} per prompt group"
        )
        if device != "cpu":
            text += "; on a GPU each worker adds its own CUDA context (about 0.5 GB)"
        rows.append(("reward model", path or "(no path)", text + _memory_note(cfg, path)))
    return rows


def _size(path: str, *, on_gpu: bool) -> str:
    """``1.2M params, 4.7 MiB (model.safetensors)`` or the estimate from config.json."""
    files = _weight_files(path)
    if files:
        total = sum(p.stat().st_size for p in files)
        return f"{human_bytes(total)} of weights ({', '.join(p.name for p in files[:3])})"
    try:
        config, where = read_config(path)
        params = estimate_params(config).decoder
    except SizeUnknown as err:
        return f"of a size {err}"  # "unknown (hub model, not downloaded)"
    per = 2 if on_gpu else 4
    dtype = "bf16" if on_gpu else "float32"
    return f"{human_count(params)} params (from {where}) x {per} bytes ({dtype}) = " + (
        human_bytes(params * per)
    )


def _memory_note(cfg: RunConfig, path: str) -> str:
    """Where a copy on the CPU and torch would pass ``reward.sandbox.memory_mb``."""
    limit = cfg.reward.sandbox.memory_mb
    files = _weight_files(path)
    if limit is None or not files:
        return ""
    need = sum(p.stat().st_size for p in files) + TORCH_RSS_BYTES
    if need <= limit << 20:
        return ""
    return (
        f"; on the CPU a worker needs about {human_bytes(need)} with torch, past "
        f"reward.sandbox.memory_mb={limit}: raise it, or put the model on a GPU"
    )


def _weight_files(path: str) -> list[Path]:
    try:
        root = Path(resolve_model_path(path, key="reward.functions.i.args.path")).expanduser()
    except ModelPathError:
        return []
    return sorted(root.glob("*.safetensors")) if root.is_dir() else []
