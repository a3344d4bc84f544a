"""Checkpoints in the run directory (a single local tier; tiers come later).

    run_dir/checkpoints/step_000040/
        model/            Hugging Face directory (safetensors + config + tokenizer)
        optimizer.pt      optimizer state (tensors, loaded with weights_only=True)
        critic/, critic_optimizer.pt   the value model and its optimizer (PPO only)
        trainer.pt        scheduler, RNG states, sampler position, step, weight version
        manifest.json     written last: file list, sizes, sha256; no manifest, no checkpoint

A checkpoint is assembled in a ``.tmp-`` sibling and renamed into place, so a
crash leaves either a complete checkpoint or a leftover that is ignored and
removed by the next save.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

MANIFEST = "manifest.json"
PREFIX = "step_"


class CheckpointError(RuntimeError):
    user_error = True


@dataclass
class TrainerState:
    step: int
    weight_version: int
    sampler: dict[str, Any]
    scheduler: dict[str, Any]
    rng: dict[str, Any]
    eval_before: dict[str, float]  # validation before the first step, for the final summary
    algo: dict[str, float] = field(default_factory=dict)  # e.g. the adaptive KL coefficient


def rng_state() -> dict[str, Any]:
    np_state = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": (np_state[0], np_state[1].tolist(), *np_state[2:]),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    kind, keys, *rest = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), *rest))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_manifest(ckpt_dir: Path, *, step: int) -> None:
    files = sorted(p for p in ckpt_dir.rglob("*") if p.is_file())
    entries = [
        {"path": str(p.relative_to(ckpt_dir)), "bytes": p.stat().st_size, "sha256": _sha256(p)}
        for p in files
    ]
    tmp = ckpt_dir / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps({"step": step, "files": entries}, indent=1))
    tmp.rename(ckpt_dir / MANIFEST)


def save_checkpoint(
    run_dir: Path,
    *,
    model,
    tokenizer,
    optimizer,
    state: TrainerState,
    keep_last: int,
    critic=None,
    critic_optimizer=None,
) -> Path:
    root = run_dir / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    for leftover in root.glob(".tmp-*"):
        shutil.rmtree(leftover)
    final = root / f"{PREFIX}{state.step:06d}"
    tmp = root / f".tmp-{final.name}"
    model.save_pretrained(tmp / "model", safe_serialization=True)
    tokenizer.save_pretrained(tmp / "model")
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    if critic is not None:
        critic.save_pretrained(tmp / "critic", safe_serialization=True)
        torch.save(critic_optimizer.state_dict(), tmp / "critic_optimizer.pt")
    torch.save(vars(state), tmp / "trainer.pt")
    _write_manifest(tmp, step=state.step)
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    for old in list_checkpoints(run_dir)[:-keep_last]:
        shutil.rmtree(old)
    return final


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoints (with a manifest), oldest first."""
    root = run_dir / "checkpoints"
    if not root.is_dir():
        return []
    return sorted(p for p in root.glob(f"{PREFIX}*") if (p / MANIFEST).is_file())


def verify_checkpoint(ckpt_dir: Path) -> None:
    manifest = json.loads((ckpt_dir / MANIFEST).read_text())
    for entry in manifest["files"]:
        path = ckpt_dir / entry["path"]
        if (
            not path.is_file()
            or path.stat().st_size != entry["bytes"]
            or _sha256(path) != entry["sha256"]
        ):
            raise CheckpointError(
                f"checkpoint {ckpt_dir} is damaged: {entry['path']} does not match its manifest. "
                "Resume from another checkpoint with trainer.resume=PATH, or delete this one."
            )


def resolve_resume(run_dir: Path, resume: str) -> Path | None:
    """``never`` -> None; ``auto`` -> newest complete checkpoint (or None); else the path."""
    if resume == "never":
        return None
    if resume == "auto":
        found = list_checkpoints(run_dir)
        return found[-1] if found else None
    path = Path(resume)
    if not (path / MANIFEST).is_file():
        raise CheckpointError(
            f"trainer.resume={resume!r} is not a complete checkpoint (no {MANIFEST}). Give a "
            "checkpoint directory such as RUN/checkpoints/step_000040, or trainer.resume=auto."
        )
    return path


def load_weights(model: torch.nn.Module, model_dir: Path) -> None:
    """Loads every safetensors shard of a Hugging Face directory into ``model`` in place.
    Only tied parameters (sharing storage with a loaded one) may be missing."""
    from safetensors.torch import load_file

    state: dict[str, torch.Tensor] = {}
    for shard in sorted(model_dir.glob("*.safetensors")):
        state.update(load_file(shard))
    missing, unexpected = model.load_state_dict(state, strict=False)
    params = dict(model.named_parameters(remove_duplicate=False))
    loaded_ptrs = {params[k].data_ptr() for k in state if k in params}
    untied = [k for k in missing if k not in params or params[k].data_ptr() not in loaded_ptrs]
    if untied or unexpected:
        raise CheckpointError(
            f"{model_dir}: weights do not match the model (missing {untied[:5]}, unexpected "
            f"{unexpected[:5]}). Resume with the model.path the run was started with."
        )


def load_checkpoint(
    ckpt_dir: Path, *, model, optimizer, critic=None, critic_optimizer=None
) -> TrainerState:
    """Loads weights and optimizers in place; returns the rest. Verifies checksums first."""
    verify_checkpoint(ckpt_dir)
    load_weights(model, ckpt_dir / "model")
    optimizer.load_state_dict(torch.load(ckpt_dir / "optimizer.pt", weights_only=True))
    if critic is not None:
        if not (ckpt_dir / "critic").is_dir():
            raise CheckpointError(
                f"checkpoint {ckpt_dir} has no critic, but this run trains one (critic: is "
                "set). Resume it with the config it was saved with, or start a new run."
            )
        load_weights(critic, ckpt_dir / "critic")
        critic_optimizer.load_state_dict(
            torch.load(ckpt_dir / "critic_optimizer.pt", weights_only=True)
        )
    return TrainerState(**torch.load(ckpt_dir / "trainer.pt", weights_only=True))
