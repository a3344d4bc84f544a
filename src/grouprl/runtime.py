"""What every entry point does around a run: where its files go, how it logs, its seeds.

Shared by training, evaluation and the command line; no model code here.
"""

from __future__ import annotations

import logging
import os
import random
import warnings
from pathlib import Path

from rich.console import Console

from grouprl.config.schema import RunConfig, TrainConfig

# Our lines carry paths, errors and library text with brackets: never read them as markup.
console = Console(stderr=True, markup=False)


def run_dir_of(cfg: RunConfig) -> Path:
    return Path(cfg.trainer.run_dir.format(name=cfg.name))


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
