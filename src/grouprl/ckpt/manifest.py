"""The manifest: written last, it is what makes a directory a checkpoint.

    step_000040/manifest.json
        {"format": 1, "step": 40, "weight_version": 40, "world_size": 1,
         "config_hash": "...", "created": 1795000000.0,
         "files": [{"path": "shards/__0_0.distcp", "bytes": ..., "sha256": "..."}, ...],
         "part": 0, "parts": 1, "save_id": ""}

``part`` of ``parts``: a node's share of a checkpoint kept in node memory across nodes
(``ckpt/node_tier.py``); a whole checkpoint is part 0 of 1. ``save_id`` tells the parts
of one save from those of another save of the same step.

A directory without its manifest is a leftover of an interrupted save, never a
checkpoint. The manifest is written to a temporary name, flushed to disk and
renamed, so it is either whole or absent.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from grouprl.ckpt.state import CheckpointError

MANIFEST = "manifest.json"
FORMAT = 1


@dataclass
class Manifest:
    step: int
    weight_version: int
    world_size: int
    config_hash: str
    files: list[dict]  # {"path", "bytes", "sha256"} for every other file
    created: float
    format: int = FORMAT
    part: int = 0
    parts: int = 1
    save_id: str = ""

    @property
    def bytes(self) -> int:
        return sum(f["bytes"] for f in self.files)


def sha256_of(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def write_manifest(
    ckpt_dir: Path,
    *,
    step: int,
    weight_version: int,
    world_size: int,
    config_hash: str,
    part: int = 0,
    parts: int = 1,
    save_id: str = "",
) -> Manifest:
    """Checksums every file of ``ckpt_dir`` and writes the manifest atomically, last."""
    files = sorted(p for p in ckpt_dir.rglob("*") if p.is_file() and p.name != MANIFEST)
    manifest = Manifest(
        step=step,
        weight_version=weight_version,
        world_size=world_size,
        config_hash=config_hash,
        files=[
            {
                "path": p.relative_to(ckpt_dir).as_posix(),
                "bytes": p.stat().st_size,
                "sha256": sha256_of(p),
            }
            for p in files
        ],
        created=time.time(),
        part=part,
        parts=parts,
        save_id=save_id,
    )
    tmp = ckpt_dir / f".{MANIFEST}.tmp"
    with tmp.open("w") as f:
        json.dump(asdict(manifest), f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    tmp.rename(ckpt_dir / MANIFEST)
    return manifest


def parse_manifest(text: str | bytes, *, where: str) -> Manifest:
    try:
        data = json.loads(text)
        manifest = Manifest(**data)
    except (ValueError, TypeError) as err:
        raise CheckpointError(f"{where}: the manifest is unreadable ({err})") from None
    if manifest.format != FORMAT:
        raise CheckpointError(
            f"{where}: checkpoint format {manifest.format}, this grouprl reads {FORMAT}; "
            "resume it with the grouprl version that wrote it"
        )
    return manifest


def read_manifest(ckpt_dir: Path) -> Manifest:
    return parse_manifest((ckpt_dir / MANIFEST).read_bytes(), where=str(ckpt_dir))


def verify(ckpt_dir: Path) -> Manifest:
    """The manifest, after checking every file's size and checksum against it."""
    manifest = read_manifest(ckpt_dir)
    for entry in manifest.files:
        path = ckpt_dir / entry["path"]
        if not path.is_file():
            problem = "is missing"
        elif path.stat().st_size != entry["bytes"]:
            problem = f"has {path.stat().st_size} bytes, the manifest says {entry['bytes']}"
        elif sha256_of(path) != entry["sha256"]:
            problem = "does not match its checksum"
        else:
            continue
        raise CheckpointError(f"checkpoint {ckpt_dir} is damaged: {entry['path']} {problem}")
    return manifest


def is_complete(ckpt_dir: Path) -> bool:
    return (ckpt_dir / MANIFEST).is_file()
