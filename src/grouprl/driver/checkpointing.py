"""The training run's side of checkpoints: what goes in, and putting it back."""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

import yaml

from grouprl.ckpt.best import Best, improved
from grouprl.ckpt.checkpointer import Checkpointer
from grouprl.ckpt.manifest import is_complete, read_manifest
from grouprl.ckpt.resume import find_resume
from grouprl.ckpt.state import TRAINER_FILE, TrainerState, rng_state, set_rng_state
from grouprl.ckpt.tiers import LocalTier, step_name
from grouprl.config.checks import derived_numbers
from grouprl.config.redact import redacted_dict
from grouprl.config.schema import RunConfig
from grouprl.driver.components import Components
from grouprl.driver.loop import sync_weights
from grouprl.driver.source import group_lag
from grouprl.driver.stream import Stream
from grouprl.types import trajectory_from_dict
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


def resume(c: Components, ckpt: Checkpointer, run_dir: Path) -> dict[str, float] | None:
    """Restores the checkpoint ``trainer.resume`` asks for; returns its eval_before."""
    found = find_resume(c.cfg.trainer.resume, ckpt, restore_dir=run_dir / "cache" / "restore")
    if found is None:
        return None
    if found.manifest.config_hash != config_hash(c.cfg):
        logger.warning(
            "the checkpoint was written by a run with another config (%s); continuing with "
            "this run's config",
            changed_keys(found.path / "config.yaml", c.cfg),
        )
    # a NodeDir (ckpt/node_tier.py) arrives on each rank as its node's Path (RayGroup)
    load_from = cast(Path, found.load_from)
    c.policy.call(PolicyWorker.load, load_from)
    if c.critic is not None:
        c.critic.call(CriticWorker.load, load_from)
    ckpt.restored()
    state = TrainerState.read(found.path / TRAINER_FILE)
    c.state.load_state_dict(asdict(state))
    _resume_stream(c, state)
    c.state.best = _best_on_disk(c.state.best, ckpt) if c.cfg.checkpoint.keep_best else None
    c.policy.call(PolicyWorker.load_scheduler_state, state.scheduler)
    set_rng_state(state.rng)
    sync_weights(c, version=state.weight_version)
    return state.eval_before


def _resume_stream(c: Components, state: TrainerState) -> None:
    """Puts the checkpoint's rollout stream back: its finished groups and the prompts it
    had admitted but not finished (issued again first), so no prompt is lost or drawn
    twice. A stream saved by a run that now has rollout.max_staleness=0 cannot be; one
    saved with a larger rollout.max_staleness loses the groups past this run's bound
    (``drop_past_bound``). One line says what was put back."""
    stream = c.rollouts
    if isinstance(stream, Stream) and state.stream is not None:
        saved = state.stream
        dropped = drop_past_bound(
            saved,
            version=state.weight_version,
            batch_size=stream.batch_size,
            max_staleness=stream.max_staleness,
        )
        stream.load_state_dict(saved, version=state.weight_version)
        logger.info(
            "the rollout stream resumes with %d buffered groups to train first (%d dropped "
            "past rollout.max_staleness=%d), %d admitted rounds to generate again (%d "
            "prompts) and %d dropped prompts to issue again",
            len(saved["buffer"]),
            dropped,
            stream.max_staleness,
            len(saved["unfinished"]),
            sum(len(r["rows"]) for r in saved["unfinished"]),
            len(saved["reissue"]),
        )
    elif state.stream is not None:
        unfinished = sum(len(r["rows"]) for r in state.stream["unfinished"])
        logger.warning(
            "the checkpoint holds a rollout stream (rollout.max_staleness >= 1) with %d "
            "finished groups and %d admitted prompts not yet trained; this run has "
            "rollout.max_staleness=0, so they are not trained (the sampler continues after "
            "them). Resume with the original rollout.max_staleness to train them.",
            len(state.stream["buffer"]),
            unfinished,
        )


def drop_past_bound(
    stream: dict[str, Any], *, version: int, batch_size: int, max_staleness: int
) -> int:
    """A saved rollout stream (``Stream.state_dict``, edited in place) resumed with a
    smaller ``max_staleness`` than its run had: the buffered groups that would train more
    than ``max_staleness`` versions behind leave the buffer and their prompts are issued
    again ahead of new ones, as ``staleness_policy=drop`` does, so each prompt still
    trains once; returns how many (0: nothing changed), with a warning.

    The first take after the resume trains policy ``version``, so buffer entry j trains
    ``version + j // batch_size``; dropping a group moves the ones after it sooner, never
    later, so one pass in FIFO order leaves every kept group within the bound. Evicted
    groups kept to fill the batch being filled (``spare``) that are past it are let go
    (they had no signal; evicted prompts are never issued again) and that batch starts
    its ``max_sampling_rounds`` over."""
    kept, dropped = [], []
    for group in stream["buffer"]:
        trains_at = version + len(kept) // batch_size
        lag = group_lag([trajectory_from_dict(t) for t in group["trajectories"]], version=trains_at)
        (dropped if lag > max_staleness else kept).append(group)
    filling_at = version + len(kept) // batch_size
    for group in stream["spare"]:
        trajectories = [trajectory_from_dict(t) for t in group["trajectories"]]
        if group_lag(trajectories, version=filling_at) > max_staleness:
            stream["spare"], stream["filling_rounds"] = [], 0
            break
    if not dropped:
        return 0
    stream["buffer"] = kept
    stream["reissue"] = stream["reissue"] + [g["row"] for g in dropped]
    stream["kept"] -= len(dropped)  # positions count the groups that train
    stream["counts"]["dropped_stale"] = stream["counts"].get("dropped_stale", 0) + len(dropped)
    logger.warning(
        "resumed with rollout.max_staleness=%d, smaller than the saved run's: %d of the %d "
        "buffered groups would lag the policy they train (version %d on) by more than that; "
        "they are dropped and their prompts generated again first, so each trains once",
        max_staleness,
        len(dropped),
        len(dropped) + len(kept),
        version,
    )
    return len(dropped)


def changed_keys(saved: Path, cfg: RunConfig, *, shown: int = 8) -> str:
    """The keys outside ``RUN_ONLY_SECTIONS`` whose values differ between the config a
    checkpoint carries (``saved``) and ``cfg``: ``train.steps: 20 -> 40, ...``."""
    if not saved.is_file():  # a checkpoint without its config
        return "model, data, rollout, algo or train sections differ"
    old = _flat(yaml.safe_load(saved.read_text()) or {})
    # through YAML as the checkpoint's copy went: tuples read back as lists
    new = _flat(yaml.safe_load(yaml.safe_dump(redacted_dict(cfg))))
    changes = [
        f"{key}: {_show(old.get(key, _UNSET))} -> {_show(new.get(key, _UNSET))}"
        for key in sorted(old.keys() | new.keys())
        if old.get(key, _UNSET) != new.get(key, _UNSET)
    ]
    more = f", and {len(changes) - shown} more" if len(changes) > shown else ""
    return ", ".join(changes[:shown]) + more if changes else "no key differs"


_UNSET = object()


def _flat(data: dict, prefix: str = "") -> dict[str, object]:
    """Dotted keys of the nested sections (lists are values), run-only sections left out."""
    flat: dict[str, object] = {}
    for key, value in data.items():
        if not prefix and key in RUN_ONLY_SECTIONS:
            continue
        if isinstance(value, dict) and value:
            flat |= _flat(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _show(value: object) -> str:
    """A value as a recipe writes it (``null``, ``true``, ``[a, b]``); unset: ``(unset)``."""
    if value is _UNSET:
        return "(unset)"
    text = yaml.safe_dump(value, default_flow_style=True, width=1000)
    return text.removesuffix("...\n").strip()  # a scalar's document-end marker


@dataclass(frozen=True)
class Finished:
    """A run that ``trainer.resume=auto`` would not advance: why, and its summary."""

    message: str
    summary: dict[str, Any]


def finished_run(cfg: RunConfig, run_dir: Path) -> Finished | None:
    """With ``trainer.resume=auto``: the run when its newest checkpoint on disk (where
    the final one goes) is already at the last step, read from the manifests and
    ``summary.json`` before anything loads or is written; None when there is a step
    to train. The last step is ``train.steps``, or for ``train.epochs`` the one the
    run's summary names if the checkpoint's config is this one."""
    if cfg.trainer.resume != "auto":
        return None
    ckpt = cfg.checkpoint
    disk = Path(ckpt.disk.dir) if ckpt.disk.dir else run_dir / "checkpoints"
    found = LocalTier("disk", disk, every=None, keep=1).complete()
    if not found:
        return None
    newest = found[-1]
    summary_file = run_dir / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.is_file() else {}
    total = derived_numbers(cfg).total_steps
    if total is None and read_manifest(Path(newest.where)).config_hash == config_hash(cfg):
        total = summary.get("total_steps") if summary.get("step") == newest.step else None
    if total is None or newest.step < total:
        return None
    steps = (
        f"train.steps={total}"
        if cfg.train.steps is not None
        else f"{total} steps (train.epochs={cfg.train.epochs:g})"
    )
    message = (
        f"run {run_dir} is already finished: its newest checkpoint ({newest.where}) is at "
        f"step {newest.step} of {steps}, so trainer.resume=auto has nothing to train; its "
        "files are left as they were. To train further, raise train.steps (e.g. "
        f"train.steps={2 * total}) and resume with trainer.resume=auto."
    )
    summary = summary or {"run_dir": str(run_dir), "step": newest.step, "total_steps": total}
    return Finished(message, summary | {"finished": True})


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
