"""What `grouprl ckpt ls|verify|prune|export` work on: the checkpoints a TARGET names.

    TARGET                                   holds
    RUN                                      RUN/checkpoints/step_*        (the disk tier)
    RUN/checkpoints, /dev/shm/grouprl/NS     DIR/step_*                    (a tier directory)
    RUN/checkpoints/step_000040              that checkpoint
    s3://BUCKET/PREFIX/NS                    s3://BUCKET/PREFIX/NS/step_*  (the S3 tier)
    s3://BUCKET/PREFIX/NS/step_000040        that checkpoint

Only complete checkpoints (with a manifest) count. Nothing here removes leftovers of
interrupted saves or creates directories: a run may be saving into the same tier, and
its staging directory must survive a `ls`. Listing reads manifests only; verifying and
exporting an S3 checkpoint download it into a temporary directory ($TMPDIR) first.
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from grouprl.assets import path_not_found
from grouprl.ckpt.best import BEST_FILE, Best, read_best
from grouprl.ckpt.manifest import MANIFEST, Manifest, parse_manifest, read_manifest, verify
from grouprl.ckpt.s3 import S3Error, S3Store
from grouprl.ckpt.state import CheckpointError
from grouprl.ckpt.tiers import Found, LocalTier, S3Tier, remove_local, step_name, step_of

RUN_CHECKPOINTS = "checkpoints"
_CLI_NAMES = {  # in this order
    "checkpoint.s3.endpoint_url null": "no --endpoint-url",
    "checkpoint.s3.endpoint_url": "--endpoint-url",
    "checkpoint.s3.uri": "TARGET",
}
_TARGETS = (
    "Allowed: a run directory, a tier directory holding step_N checkpoints "
    "(RUN/checkpoints, /dev/shm/grouprl/NAMESPACE), one checkpoint directory, or "
    "s3://BUCKET/PREFIX/NAMESPACE[/step_N]."
)


@dataclass(frozen=True)
class Source:
    """The complete checkpoints of a TARGET, oldest first. ``where`` of each is a local
    path or a full ``s3://`` URL: either is itself a valid TARGET."""

    target: str
    found: list[Found]
    single: bool  # TARGET is one checkpoint, not a tier
    store: S3Store | None = None  # the S3 prefix holding them


@dataclass(frozen=True)
class Row:
    """One checkpoint as `ckpt ls` shows it, from its manifest alone."""

    found: Found
    manifest: Manifest | None  # None when the manifest cannot be read
    problem: str | None = None
    best: Best | None = None  # set on the best validation's checkpoint (keep_best)


def _cli_names(fn: Callable) -> Callable:
    """S3 errors name the config keys of a training run; here the user typed arguments."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except S3Error as err:
            text = str(err)
            for key, argument in _CLI_NAMES.items():
                text = text.replace(key, argument)
            raise S3Error(text) from None

    return wrapper


def resolve(target: str, *, endpoint_url: str | None = None) -> Source:
    """The checkpoints ``target`` holds; ``CheckpointError`` if there are none."""
    source = _resolve_s3(target, endpoint_url) if target.startswith("s3://") else None
    source = source or _resolve_local(target)
    if not source.found:
        raise CheckpointError(
            f"TARGET={target!r} holds no complete checkpoint (a step_N directory with a "
            f"{MANIFEST}). {_children_hint(target, source.store)}{_TARGETS} Fix: point "
            "TARGET at a run's checkpoints, e.g. RUN or s3://BUCKET/PREFIX/NAMESPACE."
        )
    return source


@_cli_names
def list_checkpoints(target: str, *, endpoint_url: str | None = None) -> list[Row]:
    """Every complete checkpoint of ``target`` with its manifest; never reads shards."""
    source = resolve(target, endpoint_url=endpoint_url)
    best = _best(source)
    rows = []
    for found in source.found:
        mark = best if best is not None and best.step == found.step else None
        try:
            if source.store is not None:
                text = source.store.read_bytes(f"{found.name}/{MANIFEST}")
                manifest = parse_manifest(text, where=found.where)
            else:
                manifest = read_manifest(Path(found.where))
            rows.append(Row(found, manifest, best=mark))
        except (CheckpointError, OSError) as err:  # OSError: removed since it was listed
            rows.append(Row(found, None, str(err), best=mark))
    return rows


@_cli_names
def verify_checkpoints(
    target: str, *, step: int | None = None, endpoint_url: str | None = None
) -> list[tuple[Found, str | None]]:
    """Each checkpoint (or ``step``'s) with the reason it is damaged, None if it is
    whole: every file's size and checksum against the manifest."""
    source = resolve(target, endpoint_url=endpoint_url)
    results = []
    for found in _pick(source, step):
        try:
            with _local_copy(source, found) as path:
                verify(path)
            results.append((found, None))
        except (CheckpointError, OSError) as err:
            results.append((found, str(err)))
    return results


@_cli_names
def prune(target: str, *, keep: int, endpoint_url: str | None = None) -> list[Found]:
    """Removes all but the newest ``keep`` checkpoints of a tier (manifest first, so a
    half-removed one is never listed), and never the best validation's
    (``checkpoint.keep_best``); returns the removed ones."""
    if keep < 1:
        raise CheckpointError(
            f"--keep={keep}: prune keeps at least one checkpoint. Allowed: 1 or more. "
            "Fix: pass --keep 1 (or remove the directory yourself to drop them all)."
        )
    source = resolve(target, endpoint_url=endpoint_url)
    if source.single:
        raise CheckpointError(
            f"TARGET={target!r} is one checkpoint; prune works on a tier. Allowed: a run "
            "directory, a tier directory or s3://BUCKET/PREFIX/NAMESPACE. Fix: pass the "
            f"directory that holds it: {source.found[0].where.rstrip('/').rpartition('/')[0]}"
        )
    best = _best(source)
    removed = [f for f in source.found[:-keep] if best is None or f.step != best.step]
    for found in removed:
        if source.store is not None:
            source.store.delete_dir(found.name, first=MANIFEST)
        else:
            remove_local(Path(found.where))
    return removed


@_cli_names
def export(
    target: str,
    out: str | Path,
    *,
    step: int | None = None,
    best: bool = False,
    endpoint_url: str | None = None,
) -> tuple[Found, Path]:
    """Writes the newest checkpoint of ``target`` (or ``step``'s, or with ``best`` the
    best validation's) to ``out`` as a Hugging Face model directory; returns the
    checkpoint and ``out``."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise CheckpointError(
            f"OUT={str(out)!r} exists and is not an empty directory. Allowed: a new or "
            "empty directory. Fix: choose another OUT or remove that one."
        )
    source = resolve(target, endpoint_url=endpoint_url)
    found = _pick(source, _best_step(source) if best else step)[-1]
    if best and step is not None and step != found.step:
        raise CheckpointError(
            f"--step={step} and --best (step {found.step}) name different checkpoints. "
            "Fix: pass one of them."
        )
    from grouprl.ckpt.export import export_checkpoint  # torch: only when exporting

    with _local_copy(source, found) as path:
        export_checkpoint(path, out)
    return found, out


def _resolve_s3(target: str, endpoint_url: str | None) -> Source:
    uri = target.rstrip("/")
    parent, _, name = uri.rpartition("/")
    step = step_of(name)
    single = step is not None
    store = S3Store(parent if single else uri, endpoint_url=endpoint_url)
    store.check()  # one attempt: a missing bucket or dead endpoint fails at once
    base = f"s3://{store.bucket}/{store.prefix}".rstrip("/")
    if step is not None:
        found = [Found("s3", step, uri)] if store.exists(f"{name}/{MANIFEST}") else []
    else:
        tier = S3Tier(store, every=None, keep=1)
        found = [Found("s3", f.step, f"{base}/{f.where}") for f in tier.complete()]
    return Source(target, found, single, store)


def _resolve_local(target: str) -> Source:
    path = Path(target).expanduser()
    if not path.exists():
        fix = "Fix: check the path; list a run's checkpoints with `grouprl ckpt ls RUN`."
        raise CheckpointError(path_not_found(target, key="TARGET", tail=f"{_TARGETS} {fix}"))
    if not path.is_dir():
        raise CheckpointError(
            f"TARGET={target!r} is a file, not a directory. {_TARGETS} Fix: check the path; "
            "list a run's checkpoints with `grouprl ckpt ls RUN`."
        )
    if (path / MANIFEST).is_file():
        step = step_of(path.name)
        step = read_manifest(path).step if step is None else step
        return Source(target, [Found("local", step, str(path))], single=True)
    if step_of(path.name) is not None:
        raise CheckpointError(
            f"TARGET={target!r} has no {MANIFEST}: an interrupted save, not a checkpoint. "
            f"Fix: pick a complete one (`grouprl ckpt ls {path.parent}`)."
        )
    root = path / RUN_CHECKPOINTS if (path / RUN_CHECKPOINTS).is_dir() else path
    found = LocalTier("local", root, every=None, keep=1).complete()
    return Source(target, found, single=False)


def _children_hint(target: str, store: S3Store | None) -> str:
    """``Did you mean TARGET/NAME? `` when TARGET is one level too high: a directory of
    runs or of namespaces, or an S3 prefix of namespaces."""
    if store is not None:
        names = [n for n in store.list_names() if step_of(n) is None]
    else:
        path = Path(target).expanduser()
        names = [p.name for p in sorted(path.iterdir()) if p.is_dir() and _has_steps(p)]
    shown = ", ".join(f"{target.rstrip('/')}/{n}" for n in names[:5])
    return f"Did you mean {shown}? " if names else ""


def _has_steps(path: Path) -> bool:
    """``path`` is a tier directory or a run directory."""
    root = path / RUN_CHECKPOINTS if (path / RUN_CHECKPOINTS).is_dir() else path
    return any(step_of(p.name) is not None for p in root.iterdir())


def _pick(source: Source, step: int | None) -> list[Found]:
    if step is None:
        return source.found
    picked = [f for f in source.found if f.step == step]
    if not picked:
        have = ", ".join(str(f.step) for f in source.found)
        raise CheckpointError(
            f"--step={step}: TARGET={source.target!r} has no complete checkpoint for step "
            f"{step} ({step_name(step)}). Allowed: {have}. Fix: pass one of those steps, or "
            "leave --step out for all of them (export: the newest)."
        )
    return picked


def _best(source: Source) -> Best | None:
    """The best validation's checkpoint that a local tier keeps (``best.json``)."""
    if source.store is not None or source.single or not source.found:
        return None
    return read_best(Path(source.found[0].where).parent)


def _best_step(source: Source) -> int:
    best = _best(source)
    if best is None and source.store is None and not source.single and source.found:
        tier = Path(source.found[0].where).parent
        raise CheckpointError(
            f"--best: the run at TARGET={source.target!r} kept no best checkpoint (no "
            f"{BEST_FILE} in {tier}): it trained without checkpoint.keep_best=true, which "
            "keeps the best validation's checkpoint (it needs data.eval and "
            "trainer.eval_every). Fix: export the newest (leave --best out) or one step "
            "with --step N (`grouprl ckpt ls` lists them); train with "
            "checkpoint.keep_best=true to have a best one."
        )
    if best is None:
        raise CheckpointError(
            f"--best: TARGET={source.target!r} names no best checkpoint (no {BEST_FILE} in "
            "a run's disk tier; runs keep one with checkpoint.keep_best=true). Fix: pass "
            "the run directory or its checkpoints directory, or --step N (`grouprl ckpt "
            "ls` lists them)."
        )
    return best.step


@contextmanager
def _local_copy(source: Source, found: Found) -> Iterator[Path]:
    """``found`` as a local directory: itself, or an S3 checkpoint downloaded to a
    temporary directory removed afterwards. Errors name ``found.where``, not the copy."""
    if source.store is None:
        yield Path(found.where)
        return
    with tempfile.TemporaryDirectory(prefix="grouprl-ckpt-") as tmp:
        local = Path(tmp) / found.name
        source.store.download_dir(found.name, local)
        try:
            yield local
        except CheckpointError as err:
            raise CheckpointError(str(err).replace(str(local), found.where)) from None
