"""`grouprl export RUN OUT`: a checkpoint's weights as a Hugging Face model directory."""

from __future__ import annotations

import shutil
from pathlib import Path

from grouprl.ckpt.local import PREFIX, CheckpointError, list_checkpoints, verify_checkpoint


def find_checkpoint(run: Path, *, step: int | None = None) -> Path:
    """``run`` is a run directory (its newest checkpoint, or ``step``) or a checkpoint."""
    if (run / "manifest.json").is_file():
        return run
    found = list_checkpoints(run)
    if step is not None:
        found = [p for p in found if p.name == f"{PREFIX}{step:06d}"]
    if not found:
        have = [p.name for p in list_checkpoints(run)]
        raise CheckpointError(
            f"{run}: no complete checkpoint"
            + (f" for step {step}" if step is not None else "")
            + f" (found: {have or 'none'}). Pass a run directory made by `grouprl train` "
            "or a checkpoint directory RUN/checkpoints/step_NNNNNN."
        )
    return found[-1]


def export_run(run: str | Path, out: str | Path, *, step: int | None = None) -> Path:
    ckpt = find_checkpoint(Path(run), step=step)
    verify_checkpoint(ckpt)
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise CheckpointError(f"export target {out} is not empty; choose a new directory.")
    shutil.copytree(ckpt / "model", out, dirs_exist_ok=True)
    print(f"exported {ckpt} -> {out}")
    return out
