"""Weights & Biases, an optional extra (``pip install grouprl[wandb]``), imported late.

The W&B run id is kept in ``<run_dir>/wandb_run_id`` so a resumed grouprl run
continues the same W&B run instead of starting a new one.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from grouprl.config.observe import WandbConfig

RUN_ID_FILE = "wandb_run_id"


class WandbNotInstalledError(ImportError):
    """metrics.wandb.project is set but the wandb package is missing."""

    user_error = True


class WandbSink:
    """Logs each step's metrics to one W&B run, with the (already redacted) config."""

    def __init__(
        self,
        cfg: WandbConfig,
        *,
        run_dir: Path,
        run_name: str,
        config_dict: Mapping[str, Any],
    ) -> None:
        wandb = import_wandb(project=cfg.project)
        # The key goes in Settings, not wandb.login(), which would save it to ~/.netrc.
        settings = wandb.Settings(api_key=cfg.api_key) if cfg.api_key else None
        self._run = wandb.init(
            project=cfg.project,
            entity=cfg.entity,
            name=run_name,
            id=_run_id(Path(run_dir)),
            resume="allow",
            config=dict(config_dict),
            dir=str(run_dir),
            settings=settings,
        )

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        self._run.log(dict(metrics), step=step)

    def close(self) -> None:
        self._run.finish()


def import_wandb(*, project: str | None) -> Any:
    """Import wandb or raise a user error that says how to fix it."""
    try:
        # the optional `wandb` extra, not installed for the type checker
        import wandb  # pyright: ignore[reportMissingImports]
    except ImportError:
        raise WandbNotInstalledError(
            f"metrics.wandb.project={project!r} asks for Weights & Biases logging, but the "
            "wandb package is not installed. Run `pip install grouprl[wandb]`, or unset "
            "metrics.wandb.project (e.g. `metrics.wandb.project=null`)."
        ) from None
    return wandb


def _run_id(run_dir: Path) -> str:
    path = run_dir / RUN_ID_FILE
    if path.exists():
        return path.read_text(encoding="utf-8").strip()
    run_dir.mkdir(parents=True, exist_ok=True)
    run_id = uuid.uuid4().hex[:12]
    path.write_text(run_id + "\n", encoding="utf-8")
    return run_id
