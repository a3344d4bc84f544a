"""What every entry point does around a run: where its files go, how it logs, its seeds.

Shared by training, evaluation and the command line; no model code here.
"""

from __future__ import annotations

import json
import logging
import os
import random
import warnings
from pathlib import Path

from rich.console import Console

from grouprl.config.errors import ConfigError
from grouprl.config.schema import RunConfig
from grouprl.config.train import TrainConfig

# Our lines carry paths, errors and library text with brackets: never read them as markup.
console = Console(stderr=True, markup=False)


def run_dir_of(cfg: RunConfig) -> Path:
    return Path(cfg.trainer.run_dir.format(name=cfg.name))


def check_new_run(cfg: RunConfig) -> None:
    """A run that does not resume (``trainer.resume=never``) must not start where another
    run's metrics or checkpoints are: its curves would be appended to the old run's, and
    a later ``trainer.resume=auto`` could take the old run's checkpoint. Raises
    ``ConfigError`` naming ``trainer.run_dir`` (or the checkpoint tier) and the fixes.
    A directory a failed start left (only config.yaml, caches; a summary.json of a run
    that stopped before its first step trained) does not count."""
    if cfg.trainer.resume != "never":
        return
    run_dir = run_dir_of(cfg)
    ckpt = cfg.checkpoint
    disk = Path(ckpt.disk.dir) if ckpt.disk.dir else run_dir / "checkpoints"
    found = [p.name for p in (run_dir / "metrics.jsonl", run_dir / "summary.json") if p.exists()]
    if "summary.json" in found and _stopped_untrained(run_dir / "summary.json"):
        found.remove("summary.json")
    found += [f"checkpoints/{p.name}" for p in _checkpoint_dirs(disk)]
    key, where = f"trainer.run_dir={cfg.trainer.run_dir!r}", run_dir
    other = f"its own directory (e.g. trainer.run_dir={run_dir}-2)"
    if ckpt.disk.dir and not found:
        key, where = f"checkpoint.disk.dir={ckpt.disk.dir!r}", disk
        other = "its own checkpoint.disk.dir"
    if ckpt.memory.every is not None and not found:
        where = Path(ckpt.memory.dir) / ckpt.namespace.replace("{name}", cfg.name)
        found = [p.name for p in _checkpoint_dirs(where)]
        key = f"checkpoint.namespace={ckpt.namespace!r} (memory tier)"
        other = "its own checkpoint.namespace"
    if not found:
        return
    shown = ", ".join(sorted(found)[:4]) + (", ..." if len(found) > 4 else "")
    raise ConfigError(
        f"{key}: {where} already holds a run ({shown}), and trainer.resume=never starts a "
        "new one there. Allowed: a new or empty run directory, or resuming that run. Fix: "
        f"continue it with trainer.resume=auto, give this run {other}, or delete {where}."
    )


def _stopped_untrained(summary: Path) -> bool:
    """Whether ``summary`` records a run that stopped before any step trained."""
    try:
        record = json.loads(summary.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and "stopped" in record and record.get("step") == 0


def _checkpoint_dirs(root: Path) -> list[Path]:
    """Checkpoints, complete or not, in a tier directory (``step_N``, ``ckpt/tiers.py``);
    several ranks' memory tiers keep them a few levels down (HOST/part_K/step_N)."""
    if not root.is_dir():
        return []
    return [p for pattern in ("step_*", "*/*/step_*") for p in root.glob(pattern)]


def shared_cache(cfg: RunConfig) -> Path:
    """Built once, used by every run: search indexes of built-in corpora."""
    return run_dir_of(cfg).parent / ".cache"


def quiet_libraries() -> None:
    """Drop per-file progress bars and deprecation chatter of the libraries we drive;
    our own progress bar and log lines say what is happening."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)


def show_logs() -> None:
    """grouprl's own log lines (checkpoints, skipped rows) go to stderr through rich."""
    from rich.logging import RichHandler

    root = logging.getLogger("grouprl")
    if not any(isinstance(h, RichHandler) for h in root.handlers):
        root.addHandler(
            RichHandler(console=console, show_path=False, markup=False, log_time_format="[%X]")
        )
    root.setLevel(logging.INFO)


def seed_everything(cfg: TrainConfig) -> None:
    import numpy as np
    import torch

    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    if cfg.num_threads is not None:
        torch.set_num_threads(cfg.num_threads)
        os.environ.setdefault("OMP_NUM_THREADS", str(cfg.num_threads))
