"""The training run's side of checkpoints: what goes in, and putting it back."""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
from dataclasses import asdict
from pathlib import Path

import yaml

from grouprl.ckpt.best import Best, improved
from grouprl.ckpt.checkpointer import Checkpointer
from grouprl.ckpt.manifest import is_complete
from grouprl.ckpt.resume import find_resume
from grouprl.ckpt.state import TRAINER_FILE, TrainerState, rng_state, set_rng_state
from grouprl.ckpt.tiers import step_name
from grouprl.config.redact import redacted_dict
from grouprl.config.schema import RunConfig
from grouprl.driver.loop import Components, sync_weights
from grouprl.workers.critic import CriticWorker
from grouprl.workers.group import Role
from grouprl.workers.policy import PolicyWorker

logger = logging.getLogger(__name__)

RUN_ONLY_SECTIONS = ("trainer", "checkpoint", "metrics")
"""Sections that may change between a run and its resumption without changing the run."""


def config_hash(cfg: RunConfig) -> str:
    """Identifies what the run computes (its config without the run-only sections)."""
    data = {k: v for k, v in redacted_dict(cfg).items() if k not in RUN_ONLY_SECTIONS}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def make_checkpointer(cfg: RunConfig, run_dir: Path) -> Checkpointer:
    return Checkpointer(
        cfg.checkpoint,
        run_dir=run_dir,
        run_name=cfg.name,
        config_hash=config_hash(cfg),
        world_size=cfg.world_size,
    )


def small_files(cfg: RunConfig, *, policy: Role[PolicyWorker], tokenizer) -> dict[str, bytes]:
    """The model's config and tokenizer files (``hf/``, for export) and the resolved config,
    which every checkpoint of the run carries."""
    files = {f"hf/{name}": data for name, data in policy.call(PolicyWorker.hf_files).items()}
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer.save_pretrained(tmp)
        files |= {f"hf/{p.name}": p.read_bytes() for p in Path(tmp).iterdir() if p.is_file()}
    files["config.yaml"] = yaml.safe_dump(redacted_dict(cfg), sort_keys=False).encode()
    return files


def save(
    c: Components,
    ckpt: Checkpointer,
    *,
    eval_before: dict[str, float],
    final: bool = False,
    best: bool = False,
) -> bool:
    """Starts a save at the current step if a tier is due (``final``: the end of a
    session; ``best``: the best validation so far, which goes to disk)."""
    step = c.state.step
    if not ckpt.due_tiers(step, final=final, best=best):
        return False
    trainer = TrainerState(
        **c.checkpoint_state(),
        scheduler=c.policy.call(PolicyWorker.scheduler_state),
        rng=rng_state(),
        eval_before=eval_before,
    )
    return ckpt.save(step, trainer=trainer, files=c.checkpoint_files, final=final, best=best)


def note_validation(c: Components, validation: dict[str, float]) -> bool:
    """With ``checkpoint.keep_best``: whether this step's ``validation`` is the best so far
    (``c.state.best`` then names it, and its checkpoint goes to disk and stays)."""
    cfg = c.cfg.checkpoint
    if not cfg.keep_best or not validation:
        return False
    step = c.state.step
    new = improved(c.state.best, validation, step=step, metric=cfg.best_metric, mode=cfg.best_mode)
    if new is None:
        return False
    c.state.best = new
    logger.info("step %d has the %s so far: its checkpoint is kept on disk", step, new.describe())
    return True


def checkpointed_roles(c: Components) -> list[str]:
    return ["policy"] + ["critic"] * (c.critic is not None)


def resume(c: Components, ckpt: Checkpointer, run_dir: Path) -> dict[str, float] | None:
    """Restores the checkpoint ``trainer.resume`` asks for; returns its eval_before."""
    found = find_resume(c.cfg.trainer.resume, ckpt, restore_dir=run_dir / "cache" / "restore")
    if found is None:
        return None
    if found.manifest.config_hash != config_hash(c.cfg):
        logger.warning(
            "the checkpoint was written by a run with another config (model, data, rollout, "
            "algo or train sections differ); continuing with this run's config"
        )
    c.policy.call(PolicyWorker.load, found.load_from)
    if c.critic is not None:
        c.critic.call(CriticWorker.load, found.load_from)
    ckpt.restored()
    state = TrainerState.read(found.path / TRAINER_FILE)
    c.state.load_state_dict(asdict(state))
    c.state.best = _best_on_disk(c.state.best, ckpt) if c.cfg.checkpoint.keep_best else None
    c.policy.call(PolicyWorker.load_scheduler_state, state.scheduler)
    set_rng_state(state.rng)
    sync_weights(c, version=state.weight_version)
    return state.eval_before


def _best_on_disk(best: Best | None, ckpt: Checkpointer) -> Best | None:
    """The resumed run's best validation, if its checkpoint is still on disk (a run that
    went on past the resumed checkpoint may have found a better one and dropped it)."""
    if best is None or is_complete(ckpt.disk.root / step_name(best.step)):
        return best
    logger.warning(
        "the best validation so far (step %d, %s) has no checkpoint on disk any more; "
        "the next validation starts a new best",
        best.step,
        best.describe(),
    )
    return None
