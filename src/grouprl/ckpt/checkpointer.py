"""The asynchronous tiered checkpointer.

    loop ──save(step)──► stage to host memory (the loop waits only for this)
                          │
           writer thread  ▼  DCP shards + trainer.json + manifest into the fastest due
                          │  local tier (memory, else disk), then copies to the other
                          │
         uploader thread  ▼  S3 upload (retried with backoff), newest save first

Each tier saves on its own schedule (``checkpoint.<tier>.every``, and always at the end
and on preemption) and keeps its own number of checkpoints. A save due while the
previous one is still being written waits for it or is skipped (``checkpoint.on_busy``),
and says so. An S3 save due while an upload runs replaces any upload still queued: the
newest state is the one worth having. Per-save figures come back as metrics
(``ckpt/blocking_s``, ``ckpt/<tier>_s``, ``ckpt/<tier>_bytes``) through ``drain_metrics``.
"""

from __future__ import annotations

import logging
import queue
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from grouprl.ckpt.best import Best, read_best, write_best
from grouprl.ckpt.manifest import is_complete
from grouprl.ckpt.node_tier import NodeMemoryTier
from grouprl.ckpt.rank_shards import RankShards, ShardWriter
from grouprl.ckpt.s3 import S3Store
from grouprl.ckpt.snapshot import Shards, Snapshot, StagedShards, write_checkpoint
from grouprl.ckpt.state import CheckpointError, TrainerState
from grouprl.ckpt.tiers import Found, LocalTier, S3Tier, Tier, due, step_name
from grouprl.config.ckpt import CheckpointConfig

logger = logging.getLogger(__name__)

GB = 1 << 30


NOTICE_WAIT_S = 0.5  # shorter waits for the previous save are not worth a log line


class Checkpointer:
    def __init__(
        self,
        cfg: CheckpointConfig,
        *,
        run_dir: Path,
        run_name: str,
        config_hash: str,
        world_size: int = 1,
    ) -> None:
        self.cfg, self.config_hash = cfg, config_hash
        self.world_size = world_size
        self.namespace = cfg.namespace.replace("{name}", run_name)
        self.memory, self.node_memory, self.disk, self.outbox = _local_tiers(
            cfg, run_dir, self.namespace, world_size=world_size
        )
        self.shards: RankShards | None = None
        self.s3 = _s3_tier(cfg, self.namespace) if cfg.s3.uri is not None else None
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="ckpt-writer")
        self._write: Future | None = None
        self._staged = StagedShards()
        self._held: set[str] = set()
        self._lock = threading.Condition()
        self._next_upload: tuple[Path, int] | None = None
        self._uploading = False
        self._stop = threading.Event()  # abandon uploads
        self._closing = False  # finish the queued upload, then end
        self._results: queue.Queue[dict[str, float]] = queue.Queue()
        self._uploader = threading.Thread(target=self._upload_loop, name="ckpt-s3", daemon=True)
        if self.s3 is not None:
            self._uploader.start()

    # --- the loop's side ------------------------------------------------------

    def attach(self, group, roles: list[str]) -> None:
        """The ranks of the run (a worker group): each stages and writes its own shards of
        ``roles`` (a ``ShardWriter`` role beside them), and a memory tier across nodes
        lives on their nodes."""
        self.shards = RankShards(group.add("checkpoint", ShardWriter, uses=roles))
        if self.node_memory is not None:
            self.node_memory.attach(group, self.shards)

    def restored(self) -> None:
        """The ranks have loaded a resumed checkpoint: copies made for it can go."""
        for tier in self.tiers():
            tier.release()

    def tiers(self) -> list[Tier]:
        memory = self.node_memory or self.memory
        return [t for t in (memory, self.disk, self.s3) if t is not None]

    def due_tiers(self, step: int, *, final: bool = False, best: bool = False) -> list[str]:
        """Tiers saving at ``step``; ``final`` (end of run, preemption) adds disk and S3,
        ``best`` (a new best validation, ``checkpoint.keep_best``) adds disk."""
        names = []
        for tier in self.tiers():
            at_end = final and tier.name != "memory"
            if due(tier.every, step, final=at_end or (best and tier.name == "disk")):
                names.append(tier.name)
        return names

    def save(
        self,
        step: int,
        *,
        trainer: TrainerState,
        files: dict[str, bytes],
        final: bool = False,
        best: bool = False,
        state: Callable[[], dict[str, Any]] | None = None,
    ) -> bool:
        """Stages the state if any tier is due at ``step`` and hands it to the writer;
        returns whether a save started. ``best``: ``step`` has the best validation so far
        (``trainer.best``), kept on disk: like ``final``, never skipped. ``state`` is
        ``() -> nested state dicts`` (staged here); without it, the ranks of ``attach``
        stage their own shards."""
        tiers = self.due_tiers(step, final=final, best=best)
        if not tiers:
            return False
        started = time.perf_counter()
        if self._write is not None and not self._write.done():
            if self.cfg.on_busy == "skip" and not (final or best):
                logger.warning(
                    "checkpoint at step %d skipped: the previous save is still being written "
                    "(checkpoint.on_busy=skip; `wait` would block the loop until it is done)",
                    step,
                )
                self._results.put({"ckpt/skipped": 1.0})
                return False
            self._write.exception()
            waited = time.perf_counter() - started
            if waited > NOTICE_WAIT_S:
                logger.warning(
                    "checkpoint at step %d waited %.1f s for the previous save to be written "
                    "(checkpoint.on_busy=wait; save less often, or `skip`)",
                    step,
                    waited,
                )
        if state is not None:
            shards: Shards = self._staged
            nbytes = self._staged.stage(state())
        elif self.shards is not None:
            shards, nbytes = self.shards, self.shards.stage()
        else:
            raise RuntimeError("Checkpointer.save needs a state, or attach() to the ranks first")
        snap = Snapshot(step, trainer.weight_version, shards, trainer, files, nbytes)
        blocking = time.perf_counter() - started  # waiting for the writer, then staging
        self._write = self._writer.submit(self._write_tiers, snap, tiers, blocking)
        return True

    def drain_metrics(self) -> dict[str, float]:
        """Figures of the saves finished since the last call (newest wins)."""
        merged: dict[str, float] = {}
        while True:
            try:
                merged.update(self._results.get_nowait())
            except queue.Empty:
                return merged

    def wait(self, timeout: float | None = None, *, uploads: bool = True) -> bool:
        """Blocks until every save is written (and uploaded, with ``uploads``); False if
        ``timeout`` passed. Raises ``CheckpointError`` if the newest local write failed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._write is not None:
            try:
                error = self._write.exception(timeout=timeout)
            except TimeoutError:
                return False
            if error is not None:
                raise CheckpointError(f"the last checkpoint could not be written: {error}")
        if not uploads:
            return True
        with self._lock:
            while self._uploading or self._next_upload is not None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._lock.wait(left)
        return True

    def close(self, *, abandon_uploads: bool = False) -> None:
        if abandon_uploads:
            self._stop.set()
        self._writer.shutdown(wait=True)
        with self._lock:
            self._closing = True
            self._lock.notify_all()
        if self._uploader.is_alive():
            self._uploader.join()

    # --- the writer thread -----------------------------------------------------

    def _write_tiers(self, snap: Snapshot, tiers: list[str], blocking: float) -> None:
        metrics = {"ckpt/blocking_s": blocking, "ckpt/state_bytes": float(snap.nbytes)}
        if self.node_memory is not None and "memory" in tiers:
            tiers = [t for t in tiers if t != "memory"]
            metrics |= self._write_node_memory(snap)
            if not tiers:
                self._results.put(metrics)
                return
        local = [t for t in (self.memory, self.disk) if t is not None and t.name in tiers]
        if self.memory in local and not self.memory.make_room(snap.nbytes, self._held_now()):
            logger.warning(
                "checkpoint at step %d skips the memory tier: %.2f GB does not fit "
                "checkpoint.memory.max_gb=%s; raise it to keep a copy in memory",
                snap.step,
                snap.nbytes / GB,
                self.cfg.memory.max_gb,
            )
            local.remove(self.memory)
            if not local and "s3" not in tiers:
                self._results.put(metrics)
                return
        first = local[0] if local else self.outbox
        try:
            started = time.perf_counter()
            tmp = first.staging_dir(snap.step)
            manifest = write_checkpoint(
                snap, tmp, world_size=self.world_size, config_hash=self.config_hash
            )
            path = first.publish(tmp, snap.step)
            metrics[f"ckpt/{first.name}_s"] = time.perf_counter() - started
            metrics[f"ckpt/{first.name}_bytes"] = float(manifest.bytes)
            for other in local[1:]:
                started = time.perf_counter()
                other.copy_in(path, snap.step)
                metrics[f"ckpt/{other.name}_s"] = time.perf_counter() - started
                metrics[f"ckpt/{other.name}_bytes"] = float(manifest.bytes)
        except Exception as err:
            logger.error(
                "checkpoint at step %d failed in the %s tier: %s", snap.step, first.name, err
            )
            self._results.put(metrics | {"ckpt/failed": 1.0})
            raise
        kept = self._keep_best(snap.trainer) if self.disk in local else set()
        for tier in local:
            tier.prune(self._held_now() | (kept if tier is self.disk else set()))
        self._results.put(metrics)
        if "s3" in tiers:
            self._queue_upload(path, snap.step)
        logger.info("checkpoint at step %d saved to %s", snap.step, ", ".join(tiers))

    def _write_node_memory(self, snap: Snapshot) -> dict[str, float]:
        """The memory tier of ranks on several nodes: parts and peer replicas there."""
        memory = self.node_memory
        assert memory is not None, "the memory tier is the nodes' (several ranks)"
        per_node = memory.node_bytes(snap.nbytes)
        if per_node > memory.budget:
            logger.warning(
                "checkpoint at step %d skips the memory tier: a node's part and its peer's "
                "copy (%.2f GB) do not fit checkpoint.memory.max_gb=%s; raise it",
                snap.step,
                per_node / GB,
                self.cfg.memory.max_gb,
            )
            return {}
        started = time.perf_counter()
        try:
            written = memory.write(snap, world_size=self.world_size, config_hash=self.config_hash)
        except Exception as err:
            logger.error("checkpoint at step %d failed in the memory tier: %s", snap.step, err)
            self._results.put({"ckpt/failed": 1.0})
            raise
        logger.info("checkpoint at step %d saved to node memory", snap.step)
        return {"ckpt/memory_s": time.perf_counter() - started, "ckpt/memory_bytes": written}

    def _keep_best(self, trainer: TrainerState) -> set[str]:
        """The best validation's disk checkpoint, named in ``best.json`` once it is there;
        the set of its path, for pruning to skip (empty without ``keep_best``)."""
        best = Best.from_dict(trainer.best)
        if best is None:
            return set()
        path = self.disk.root / step_name(best.step)
        if not is_complete(path):  # dropped by a run that was resumed from before it
            return set()
        if read_best(self.disk.root) != best:
            write_best(self.disk.root, best)
        return {str(path)}

    def _held_now(self) -> set[str]:
        with self._lock:
            return set(self._held)

    # --- the uploader thread ---------------------------------------------------

    def _queue_upload(self, path: Path, step: int) -> None:
        with self._lock:
            if self._next_upload is not None:
                replaced, old_step = self._next_upload
                logger.warning(
                    "s3: upload of step %d dropped, step %d is newer and the upload before "
                    "it is still running",
                    old_step,
                    step,
                )
                self._release(replaced)
            self._held.add(str(path))
            self._next_upload = (path, step)
            self._lock.notify_all()

    def _upload_loop(self) -> None:
        assert self.s3 is not None
        while True:
            with self._lock:
                while self._next_upload is None and not (self._closing or self._stop.is_set()):
                    self._lock.wait()
                if self._stop.is_set() and self._next_upload is not None:
                    logger.warning("s3: upload of step %d abandoned", self._next_upload[1])
                    self._release(self._next_upload[0])
                    self._next_upload = None
                if self._next_upload is None:
                    return
                path, step = self._next_upload
                self._next_upload, self._uploading = None, True
            try:
                started = time.perf_counter()
                sent = self.s3.upload(path, step, stop=self._stop)
                self.s3.prune()
                self._results.put(
                    {"ckpt/s3_s": time.perf_counter() - started, "ckpt/s3_bytes": float(sent)}
                )
                logger.info("checkpoint at step %d uploaded to S3", step)
            except Exception as err:
                logger.error("s3: the upload of step %d failed: %s", step, err)
                self._results.put({"ckpt/s3_failed": 1.0})
            finally:
                with self._lock:
                    self._release(path)
                    self._uploading = False
                    self._lock.notify_all()

    def _release(self, path: Path) -> None:
        """Called with the lock held: ``path`` is no longer needed for an upload."""
        self._held.discard(str(path))
        if path.parent == self.outbox.root:
            shutil.rmtree(path, ignore_errors=True)

    def newest(self) -> list[Found]:
        """Every complete checkpoint of every tier, newest first (memory before disk
        before S3 at the same step)."""
        order = {"memory": 0, "disk": 1, "s3": 2}
        found = [f for tier in self.tiers() for f in tier.complete()]
        return sorted(found, key=lambda f: (-f.step, order[f.tier]))


def _local_tiers(
    cfg: CheckpointConfig, run_dir: Path, namespace: str, *, world_size: int
) -> tuple[LocalTier | None, NodeMemoryTier | None, LocalTier, LocalTier]:
    """Memory in this process's node (one rank) or across the ranks' nodes (several),
    disk, and the outbox (S3-only saves wait there for their upload), with the leftovers
    of interrupted saves removed."""
    memory = node_memory = None
    if cfg.memory.every is not None:
        root, budget = Path(cfg.memory.dir) / namespace, int(cfg.memory.max_gb * GB)
        if world_size > 1:
            node_memory = NodeMemoryTier(
                root, every=cfg.memory.every, keep=cfg.memory.keep, budget=budget
            )
        else:
            memory = LocalTier(
                "memory", root, every=cfg.memory.every, keep=cfg.memory.keep, budget=budget
            )
    disk_root = Path(cfg.disk.dir) if cfg.disk.dir else run_dir / "checkpoints"
    disk = LocalTier("disk", disk_root, every=cfg.disk.every, keep=cfg.disk.keep)
    for tier in (t for t in (memory, disk) if t is not None):
        try:
            tier.remove_leftovers()
        except OSError as err:
            raise CheckpointError(
                f"checkpoint.{tier.name}.dir: cannot use {tier.root} ({err.strerror}); give a "
                "writable directory (memory: a RAM-backed one such as /dev/shm/grouprl)"
            ) from None
    outbox = LocalTier("outbox", disk_root / ".outbox", every=None, keep=1)
    shutil.rmtree(outbox.root, ignore_errors=True)  # uploads a crash cut short
    return memory, node_memory, disk, outbox


def _s3_tier(cfg: CheckpointConfig, namespace: str) -> S3Tier:
    """The S3 tier, checked reachable now (a wrong bucket fails before any model loads)."""
    assert cfg.s3.uri is not None
    store = S3Store(
        f"{cfg.s3.uri.rstrip('/')}/{namespace}",
        endpoint_url=cfg.s3.endpoint_url,
        region=cfg.s3.region,
        backoff_s=min(1.0, cfg.s3.max_backoff_s),
        max_backoff_s=cfg.s3.max_backoff_s,
    )
    store.check()
    tier = S3Tier(store, every=cfg.s3.every, keep=cfg.s3.keep)
    tier.remove_leftovers()
    return tier
