"""Finding the checkpoint to resume from, and loading it.

``trainer.resume=auto`` takes the newest complete checkpoint across the tiers (memory
first, then disk, then S3 at the same step), verifies every file against its manifest,
and falls back to the next one when a check fails. ``trainer.resume=PATH`` names one
checkpoint: a directory, or ``s3://bucket/prefix/NAMESPACE/step_N``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from grouprl.ckpt.checkpointer import Checkpointer
from grouprl.ckpt.manifest import MANIFEST, verify
from grouprl.ckpt.s3 import S3Store
from grouprl.ckpt.shards import load_shards, shard_parts
from grouprl.ckpt.snapshot import SHARDS
from grouprl.ckpt.state import TRAINER_FILE, CheckpointError, TrainerState
from grouprl.ckpt.tiers import Restored, step_name, step_of

logger = logging.getLogger(__name__)


def find_resume(resume: str, ckpt: Checkpointer, *, restore_dir: Path) -> Restored | None:
    """The verified checkpoint ``trainer.resume`` asks for; None to start fresh."""
    if resume == "never":
        return None
    if resume != "auto":
        return _explicit(resume, ckpt, restore_dir=restore_dir)
    tiers = {tier.name: tier for tier in ckpt.tiers()}
    for found in ckpt.newest():
        try:
            restored = tiers[found.tier].restore(found, restore_dir / step_name(found.step))
        except Exception as err:  # a damaged or unreachable copy: the next one may do
            logger.warning(
                "checkpoint step %d in the %s tier (%s) cannot be used: %s; trying the next",
                found.step,
                found.tier,
                found.where,
                err,
            )
            continue
        logger.info("resuming from step %d, %s", found.step, restored.source)
        return restored
    logger.info("trainer.resume=auto: no checkpoint in any tier, starting fresh")
    return None


def _explicit(resume: str, ckpt: Checkpointer, *, restore_dir: Path) -> Restored:
    where, tier = Path(resume), "path"
    if resume.startswith("s3://"):
        parent, _, name = resume.rstrip("/").rpartition("/")
        if step_of(name) is None:
            raise CheckpointError(
                f"trainer.resume={resume!r}: an S3 checkpoint ends with /step_N (e.g. "
                "s3://bucket/prefix/NAMESPACE/step_000040); list them with `grouprl ckpt ls`"
            )
        store = S3Store(parent, endpoint_url=ckpt.cfg.s3.endpoint_url, region=ckpt.cfg.s3.region)
        where, tier = restore_dir / name, "s3"
        store.download_dir(name, where)
    if not (where / MANIFEST).is_file():
        raise CheckpointError(
            f"trainer.resume={resume!r} is not a complete checkpoint (no {MANIFEST}). Give "
            "a checkpoint such as RUN/checkpoints/step_000040, or trainer.resume=auto."
        )
    manifest = verify(where)
    logger.info("resuming from step %d (%s)", manifest.step, resume)
    return Restored(where, tier, manifest, source=resume)


PARTS = {"model": "optimizer", "critic": "critic_optimizer"}
"""The shards' top-level parts: a model and its optimizer's state."""


def part_state(model, optimizer, *, part: str = "model") -> dict[str, Any]:
    """``{part: model state dict, PARTS[part]: optimizer state dict}``, keyed by parameter
    name (DTensor shards under FSDP2)."""
    model_sd, optim_sd = get_state_dict(model, optimizer)
    return {part: model_sd, PARTS[part]: optim_sd}


def load_part(ckpt_dir: Path, model, optimizer, *, part: str = "model", process_group=None):
    """Loads one part of the checkpoint's shards into ``model`` and ``optimizer`` in place,
    resharding as needed (every rank of a group calls this)."""
    if part not in shard_parts(ckpt_dir / SHARDS):
        raise CheckpointError(
            f"checkpoint {ckpt_dir} has no {part}, but this run trains one. Resume it with "
            "the config it was saved with, or start a new run."
        )
    state = part_state(model, optimizer, part=part)
    try:
        load_shards(state, ckpt_dir / SHARDS, process_group=process_group)
    except Exception as err:
        raise CheckpointError(
            f"checkpoint {ckpt_dir} does not fit this run's {part} ({err}); resume with the "
            "model.path (and critic.path) the run was started with"
        ) from None
    set_state_dict(
        model, optimizer, model_state_dict=state[part], optim_state_dict=state[PARTS[part]]
    )


def training_state(*, model, optimizer, critic=None, critic_optimizer=None) -> dict[str, Any]:
    """The tensors a checkpoint holds: what ``Checkpointer.save`` stages and
    ``load_training`` fills."""
    state = part_state(model, optimizer)
    if critic is not None:
        state |= part_state(critic, critic_optimizer, part="critic")
    return state


def load_training(
    ckpt_dir: Path, *, model, optimizer, critic=None, critic_optimizer=None, process_group=None
) -> TrainerState:
    """Loads the checkpoint's tensors into the models and optimizers in place and returns
    the trainer state."""
    if critic is not None:
        load_part(ckpt_dir, critic, critic_optimizer, part="critic", process_group=process_group)
    load_part(ckpt_dir, model, optimizer, process_group=process_group)
    return TrainerState.read(ckpt_dir / TRAINER_FILE)
