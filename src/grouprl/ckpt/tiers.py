"""Storage tiers: where finished checkpoints live, each with its own schedule and retention.

    memory  DIR/NAMESPACE/step_000040/   RAM-backed (/dev/shm): survives the process
    disk    RUN_DIR/checkpoints/step_000040/
    s3      s3://bucket/prefix/NAMESPACE/step_000040/

A checkpoint is assembled under a hidden temporary name in its tier and renamed into
place once its manifest is written (S3: the manifest is uploaded last), so every
listed checkpoint is complete. Leftovers of interrupted saves are removed when a
tier opens. A tier never deletes a checkpoint another save still reads from (``held``).
"""

from __future__ import annotations

import logging
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from grouprl.ckpt.manifest import MANIFEST, Manifest, is_complete, verify
from grouprl.ckpt.s3 import S3Store

logger = logging.getLogger(__name__)

PREFIX = "step_"
TMP = ".tmp-"


def step_name(step: int) -> str:
    return f"{PREFIX}{step:06d}"


def step_of(name: str) -> int | None:
    digits = name.removeprefix(PREFIX)
    return int(digits) if name.startswith(PREFIX) and digits.isdigit() else None


def due(every: int | None, step: int, *, final: bool) -> bool:
    return final or (every is not None and step % every == 0)


@dataclass(frozen=True)
class Found:
    """A complete checkpoint in a tier: ``where`` is a local path or an S3 name."""

    tier: str
    step: int
    where: str

    @property
    def name(self) -> str:
        """The checkpoint's own name (``step_N``): the last part of ``where``."""
        return self.where.rstrip("/").rpartition("/")[2]


@dataclass
class Restored:
    """A verified checkpoint to resume from: ``path`` holds its small files and manifest;
    the ranks load their shards from ``load_from`` (``path``, or each node's own copy)."""

    path: Path
    tier: str
    manifest: Manifest
    source: str = ""  # for the log line: which tier, where
    load_from: object = None  # a Path, or ckpt.node_tier.NodeDir

    def __post_init__(self) -> None:
        if self.load_from is None:
            self.load_from = self.path


class Tier(Protocol):
    """Where finished checkpoints live (memory, disk, S3, the memory of several nodes):
    each lists its complete ones and opens one for a resume. Writing differs by tier
    and is the checkpointer's business."""

    name: str
    every: int | None

    def complete(self) -> list[Found]:
        """Complete checkpoints, oldest first."""
        ...

    def restore(self, found: Found, into: Path) -> Restored:
        """``found``, verified against its manifest, where the ranks can load it (``into``:
        an empty local directory the tier may use). Raises when it cannot be used."""
        ...

    def release(self) -> None:
        """The ranks have loaded the restored checkpoint: copies made for it can go."""
        ...


class LocalTier:
    """Memory or disk: a directory of ``step_N`` checkpoints."""

    def __init__(
        self, name: str, root: Path, *, every: int | None, keep: int, budget: int | None = None
    ) -> None:
        self.name, self.root, self.every, self.keep, self.budget = name, root, every, keep, budget

    def remove_leftovers(self) -> None:
        """Removes what interrupted saves left (only the run that owns the tier may)."""
        self.root.mkdir(parents=True, exist_ok=True)
        for leftover in self.root.glob(f"{TMP}*"):
            logger.info("%s tier: removing %s, left by an interrupted save", self.name, leftover)
            shutil.rmtree(leftover, ignore_errors=True)

    def complete(self) -> list[Found]:
        """Complete checkpoints, oldest first (reading only names and manifests)."""
        if not self.root.is_dir():
            return []
        found = [
            Found(self.name, step, str(p))
            for p in self.root.iterdir()
            if (step := step_of(p.name)) is not None and is_complete(p)
        ]
        return sorted(found, key=lambda f: f.step)

    def restore(self, found: Found, into: Path) -> Restored:
        path = Path(found.where)
        return Restored(path, self.name, verify(path), source=f"{self.name} tier ({path})")

    def release(self) -> None:
        """Nothing to drop: the ranks read the tier's own directory."""

    def staging_dir(self, step: int) -> Path:
        tmp = self.root / f"{TMP}{step_name(step)}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        return tmp

    def publish(self, tmp: Path, step: int) -> Path:
        """Renames a finished staging directory (manifest written) into place."""
        final = self.root / step_name(step)
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        return final

    def copy_in(self, src: Path, step: int) -> Path:
        """A copy of the finished checkpoint ``src``, its manifest copied last."""
        tmp = self.root / f"{TMP}{step_name(step)}"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(src, tmp, ignore=shutil.ignore_patterns(MANIFEST))
        shutil.copy2(src / MANIFEST, tmp / MANIFEST)
        return self.publish(tmp, step)

    def prune(self, held: set[str]) -> None:
        """Keeps the newest ``keep`` (and any checkpoint still held)."""
        for old in self.complete()[: -self.keep]:
            if old.where not in held:
                remove_local(Path(old.where))

    def make_room(self, nbytes: int, held: set[str]) -> bool:
        """Drops the oldest checkpoints until ``nbytes`` more fit the budget; False if they
        cannot (the checkpoint is bigger than the budget, or the rest are held)."""
        if self.budget is None:
            return True
        if nbytes > self.budget:
            return False
        for old in self.complete():
            if self.used() + nbytes <= self.budget:
                return True
            if old.where not in held:
                remove_local(Path(old.where))
        return self.used() + nbytes <= self.budget

    def used(self) -> int:
        return sum(p.stat().st_size for p in self.root.rglob("*") if p.is_file())


def remove_local(path: Path) -> None:
    """Removes a checkpoint, manifest first: a half-removed one is never listed."""
    (path / MANIFEST).unlink(missing_ok=True)
    shutil.rmtree(path, ignore_errors=True)


class S3Tier:
    """Checkpoints under ``s3://bucket/prefix/NAMESPACE/``."""

    name = "s3"

    def __init__(self, store: S3Store, *, every: int | None, keep: int) -> None:
        self.store, self.every, self.keep = store, every, keep

    def complete(self) -> list[Found]:
        found = [
            Found(self.name, step, name)
            for name in self.store.list_names()
            if (step := step_of(name)) is not None and self.store.exists(f"{name}/{MANIFEST}")
        ]
        return sorted(found, key=lambda f: f.step)

    def remove_leftovers(self) -> None:
        """Prefixes without a manifest: uploads a crash cut short."""
        for name in self.store.list_names():
            if step_of(name) is not None and not self.store.exists(f"{name}/{MANIFEST}"):
                logger.info("s3 tier: removing %s, left by an interrupted upload", name)
                self.store.delete_dir(name)

    def upload(self, src: Path, step: int, stop: threading.Event | None = None) -> int:
        return self.store.upload_dir(src, step_name(step), last=MANIFEST, stop=stop)

    def restore(self, found: Found, into: Path) -> Restored:
        """Downloads ``found`` into ``into`` and verifies it there."""
        shutil.rmtree(into, ignore_errors=True)
        self.store.download_dir(found.where, into)
        return Restored(into, self.name, verify(into), source=f"s3 tier ({found.where})")

    def release(self) -> None:
        """The download stays in the run's cache until the next resume replaces it."""

    def prune(self) -> None:
        for old in self.complete()[: -self.keep]:
            self.store.delete_dir(old.where, first=MANIFEST)
