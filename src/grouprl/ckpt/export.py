"""A checkpoint's policy as a Hugging Face model directory (`grouprl ckpt export`).

The shards' own metadata gives every tensor's shape and dtype, so the weights load
without building the training setup; the model class comes from the checkpoint's
``hf/config.json`` and the tokenizer files are copied as they are.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import torch
import yaml
from torch.distributed.checkpoint.metadata import TensorStorageMetadata

from grouprl.ckpt.manifest import MANIFEST, verify
from grouprl.ckpt.shards import SafeReader, load_shards
from grouprl.ckpt.snapshot import SHARDS
from grouprl.ckpt.state import CheckpointError
from grouprl.ckpt.tiers import LocalTier, step_name
from grouprl.lora_weights import merged_weights

HF_FILES = "hf"


def find_checkpoint(run: Path, *, step: int | None = None) -> Path:
    """``run`` is a checkpoint, or a run directory (its newest disk checkpoint, or
    ``step``'s)."""
    if (run / MANIFEST).is_file():
        return run
    root = run / "checkpoints"
    found = LocalTier("disk", root, every=None, keep=1).complete() if root.is_dir() else []
    picked = [f for f in found if step is None or f.step == step]
    if not picked:
        have = [f.name for f in found]
        raise CheckpointError(
            f"{run}: no complete checkpoint"
            + (f" for step {step} ({step_name(step)})" if step is not None else "")
            + f" (found: {have or 'none'}). Pass a run directory made by `grouprl train` "
            "or a checkpoint directory RUN/checkpoints/step_NNNNNN."
        )
    return Path(picked[-1].where)


def part_state(ckpt_dir: Path, part: str = "model") -> dict[str, torch.Tensor]:
    """The full tensors of one part (``model``, ``critic``) of a checkpoint's shards."""
    metadata = SafeReader(ckpt_dir / SHARDS).read_metadata()
    template = {}
    for key, meta in metadata.state_dict_metadata.items():
        if key.startswith(f"{part}.") and isinstance(meta, TensorStorageMetadata):
            template[key.removeprefix(f"{part}.")] = torch.empty(
                tuple(meta.size), dtype=meta.properties.dtype
            )
    if not template:
        raise CheckpointError(f"checkpoint {ckpt_dir} has no {part} tensors")
    load_shards({part: template}, ckpt_dir / SHARDS)
    return template


def export_checkpoint(ckpt_dir: Path, out: Path) -> Path:
    """Writes the checkpoint's policy and tokenizer to ``out`` (which must be empty)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    verify(ckpt_dir)
    if out.exists() and any(out.iterdir()):
        raise CheckpointError(f"export target {out} is not empty; choose a new directory.")
    hf = ckpt_dir / HF_FILES
    state = merged_weights(part_state(ckpt_dir), scaling=_lora_scaling(ckpt_dir))
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(hf))
    model.load_state_dict(state, strict=True)
    with tempfile.TemporaryDirectory(dir=out.parent if out.parent.exists() else None) as tmp:
        staging = Path(tmp) / "model"
        shutil.copytree(hf, staging)
        model.save_pretrained(staging, safe_serialization=True)
        _default_modes(staging)
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.exists():
            out.rmdir()
        shutil.move(staging, out)
    return out


def _default_modes(directory: Path) -> None:
    """Gives every file the mode a new file gets here (0644 under umask 022):
    save_pretrained leaves model.safetensors 0600, its other files as the umask says."""
    probe = directory / ".mode-probe"
    probe.touch()
    mode = probe.stat().st_mode & 0o777
    probe.unlink()
    for path in directory.rglob("*"):
        if path.is_file():
            path.chmod(mode)


def _lora_scaling(ckpt_dir: Path) -> float:
    """alpha / r of the run's LoRA adapters (from the checkpoint's config.yaml); 0 for a
    run without them."""
    config = ckpt_dir / "config.yaml"
    if not config.is_file():
        return 0.0
    lora = (yaml.safe_load(config.read_text()).get("train") or {}).get("lora") or {}
    return lora["alpha"] / lora["rank"] if lora.get("rank") else 0.0
