"""The memory tier of a run whose ranks span nodes: each node keeps its own ranks'
shards in its RAM-backed directory, and a replica of its peer's.

    MEMORY_DIR/NAMESPACE/TAG/part_00/step_000040/   node TAG's ranks' shards (part 0 of 2)
                            part_01/step_000040/   the replica of part 1, from its peer
                            restore/step_000040/   what this node's ranks load, at resume

A part is a checkpoint directory of its own: DCP's ``shards/.metadata``, the shard files
its ranks wrote, the small files (``trainer.json``, ``hf/``, ``config.yaml``) and a
manifest, written last, that says which part of how many it is and which save it
belongs to (``save_id``). Part k (the ranks of bundle k) is replicated on the node of
part k+1 (mod the number of parts), so losing any one node's memory loses no step.

On resume, a step counts when every part of one save is held, intact, by some node. Each
rank works out the shard files it will read (DCP's load plan: not only its own, since
a tensor every rank holds is saved by one of them); each node links the ones it holds
into ``restore/`` and fetches the rest from a peer that holds them.

``TAG`` is the node's host name, or ``GROUPRL_NODE_TAG`` when set (tests run several
nodes on one machine). ``NodeStore`` does one node's file work, inside a rank's
process; ``NodeMemoryTier`` is the driver's side, calling the ranks of a Ray group.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import uuid
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from grouprl.ckpt.manifest import MANIFEST, parse_manifest, verify, write_manifest
from grouprl.ckpt.rank_shards import RankShards, ShardWriter
from grouprl.ckpt.shards import METADATA, parse_metadata
from grouprl.ckpt.snapshot import SHARDS, Snapshot
from grouprl.ckpt.state import TRAINER_FILE, CheckpointError
from grouprl.ckpt.tiers import Found, LocalTier, Restored, step_name

logger = logging.getLogger(__name__)

TAG_ENV = "GROUPRL_NODE_TAG"
RESTORE = "restore"
META_FILE = f"{SHARDS}/{METADATA}"


def node_tag() -> str:
    return os.environ.get(TAG_ENV) or socket.gethostname()


@dataclass(frozen=True)
class NodeDir:
    """A directory under each node's own memory root: every rank that gets one as an
    argument reads it as the path on its node."""

    root: str
    relative: str

    def here(self) -> Path:
        return Path(self.root) / node_tag() / self.relative


class NodeStore:
    """One node's share of the tier: its parts, each a ``LocalTier`` of steps."""

    def __init__(self, root: str, *, keep: int = 1, budget: int | None = None) -> None:
        self.root = Path(root) / node_tag()
        self.keep, self.budget = keep, budget

    def part(self, k: int) -> LocalTier:
        tier = LocalTier(
            "memory", self.root / f"part_{k:02d}", every=None, keep=self.keep, budget=self.budget
        )
        tier.root.mkdir(parents=True, exist_ok=True)
        return tier

    def begin(self, k: int, step: int, nbytes: int) -> str:
        """An empty staging directory for part ``k`` of ``step``, older steps dropped to
        make room for ``nbytes``."""
        tier = self.part(k)
        tier.remove_leftovers()  # of saves cut short here (this node writes one at a time)
        tier.make_room(nbytes, held=set())
        return str(tier.staging_dir(step))

    def finish(self, staging: str, k: int, step: int, files: dict[str, bytes], **fields) -> None:
        """Adds ``files`` beside the shards the ranks wrote into ``staging``, writes the
        manifest (``fields``: its step, weight_version, ...), publishes, prunes."""
        tmp = Path(staging)
        _write_files(tmp, {n: d for n, d in files.items() if not (tmp / n).exists()})
        write_manifest(tmp, step=step, part=k, **fields)
        tier = self.part(k)
        tier.publish(tmp, step)
        tier.prune(held=set())

    def read(self, k: int, step: int, names: list[str] | None = None) -> dict[str, bytes]:
        """Files of part ``k`` of ``step`` (all of them, the manifest too, by default)."""
        path = self.part(k).root / step_name(step)
        if names is None:
            names = [p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file()]
        return {name: (path / name).read_bytes() for name in names}

    def store(self, k: int, step: int, files: dict[str, bytes]) -> None:
        """A peer's part ``k``, checked against its manifest before it is published."""
        tier = self.part(k)
        tier.remove_leftovers()
        tier.make_room(sum(map(len, files.values())), held=set())
        tmp = tier.staging_dir(step)
        _write_files(tmp, {n: d for n, d in files.items() if n != MANIFEST})
        _write_files(tmp, {MANIFEST: files[MANIFEST]})
        verify(tmp)
        tier.publish(tmp, step)
        tier.prune(held=set())

    def held(self) -> list[dict[str, Any]]:
        """The complete parts here: their manifests (read, not yet verified)."""
        out = []
        for part_dir in sorted(self.root.glob("part_*")):
            for found in LocalTier("memory", part_dir, every=None, keep=1).complete():
                manifest = parse_manifest(
                    (Path(found.where) / MANIFEST).read_bytes(), where=found.where
                )
                out.append(asdict(manifest) | {"tag": node_tag()})
        return out

    def check(self, k: int, step: int) -> str | None:
        """Why part ``k`` of ``step`` here cannot be used (None: it is intact)."""
        try:
            verify(self.part(k).root / step_name(step))
        except (CheckpointError, OSError) as err:
            return str(err)
        return None

    def assemble(self, step: int, local: dict[str, int], fetched: dict[str, bytes]) -> None:
        """``restore/step_N``: the files of ``local`` (name -> part) linked from this
        node's parts, and the ``fetched`` ones written."""
        out = self.root / RESTORE / step_name(step)
        self.drop_restored()
        out.mkdir(parents=True)
        for name, k in local.items():
            target = out / name
            target.parent.mkdir(parents=True, exist_ok=True)
            source = self.part(k).root / step_name(step) / name
            try:
                os.link(source, target)
            except OSError:  # another filesystem, or no hard links: a copy will do
                shutil.copy2(source, target)
        _write_files(out, fetched)

    def drop_restored(self) -> None:
        shutil.rmtree(self.root / RESTORE, ignore_errors=True)


class NodeStoreRole(NodeStore):
    """``NodeStore`` as a role of a Ray worker group: built on every rank, called on each
    node's first rank (``NodeMemoryTier``)."""

    def __init__(self, rank, *, root: str, keep: int, budget: int) -> None:
        super().__init__(root, keep=keep, budget=budget)

    def assemble_fetched(self, step: int, local: dict[str, int], fetched: list) -> None:
        """``assemble`` with ``fetched`` as Ray references to the files a peer read."""
        import ray

        files = {name: data for part in ray.get(fetched) for name, data in part.items()}
        self.assemble(step, local, files)


def _write_files(root: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


class NodeMemoryTier:
    """The driver's side: saves, lists and restores through the ranks of a Ray group
    (``attach``), one leader rank per node doing the node's file work."""

    name = "memory"

    def __init__(self, root: Path, *, every: int | None, keep: int, budget: int) -> None:
        self.root, self.every, self.keep, self.budget = str(root), every, keep, budget
        self.group = self.store = self.shards = None

    def attach(self, group, shards: RankShards) -> None:
        """Works through ``group``'s ranks: a ``NodeStoreRole`` on each, and ``shards``."""
        self.group, self.shards = group, shards
        self.store = group.add(
            "node_memory", NodeStoreRole, root=self.root, keep=self.keep, budget=self.budget // 2
        )

    # --- saving ---------------------------------------------------------------------

    def node_bytes(self, nbytes: int) -> int:
        """What a save of ``nbytes`` puts on each node: its part, and its peer's copy."""
        parts = self._group().nodes
        return nbytes // parts * (2 if parts > 1 else 1)

    def write(self, snap: Snapshot, *, world_size: int, config_hash: str) -> int:
        """Each node's part of ``snap``, then each part's replica on its peer; the bytes
        written on the nodes."""
        group = self._group()
        leaders, parts, step = group.leaders(), group.nodes, snap.step
        staging = group.gather(
            [
                self._store().on(leader, NodeStore.begin, k, step, snap.nbytes // parts)
                for k, leader in enumerate(leaders)
            ],
            what="begin a memory checkpoint",
        )
        self._shards().write_parts([f"{s}/{SHARDS}" for s in staging], group.ranks_of)
        fields = {
            "weight_version": snap.weight_version,
            "world_size": world_size,
            "config_hash": config_hash,
            "parts": parts,
            "save_id": uuid.uuid4().hex,
        }
        files = dict(snap.files) | {TRAINER_FILE: snap.trainer.to_json()}

        def finish(ks: range) -> None:
            group.gather(
                [
                    self._store().on(
                        leaders[k], NodeStore.finish, staging[k], k, step, files, **fields
                    )
                    for k in ks
                ],
                what="finish a memory checkpoint",
            )

        finish(range(1))  # part 0 holds DCP's metadata (rank 0 wrote it): every part gets it
        [metadata] = group.gather(
            [self._store().on(leaders[0], NodeStore.read, 0, step, [META_FILE])],
            what="read metadata",
        )
        files |= metadata
        finish(range(1, parts))
        if parts > 1:
            group.gather(
                [
                    self._store().on(
                        leaders[(k + 1) % parts],
                        NodeStore.store,
                        k,
                        step,
                        self._store().on(leaders[k], NodeStore.read, k, step),
                    )
                    for k in range(parts)
                ],
                what="copy memory checkpoints to peer nodes",
            )
        return self.node_bytes(snap.nbytes) * parts

    # --- resuming ---------------------------------------------------------------------

    def complete(self) -> list[Found]:
        """Steps whose every part some node holds (one save's parts), oldest first;
        ``where`` is the save's id."""
        found = {}
        for (step, save_id), copies in self._held().items():
            parts = next(iter(copies.values()))[0][0]["parts"]
            if len(copies) == parts:
                found[step] = Found(self.name, step, save_id)
        return [found[s] for s in sorted(found)]

    def restore(self, found: Found, into: Path) -> Restored:
        """Every node's ``restore/step_N`` holding the shard files its ranks read (linked
        from its own parts, fetched from a peer for the rest), and the driver's copy of
        the small files in ``into``. Raises ``CheckpointError`` when some part has no
        intact copy left."""
        group = self._group()
        leaders, step = group.leaders(), found.step
        copies = self._held()[(step, found.where)]
        intact = {k: self._intact(step, k, held) for k, held in copies.items()}
        contents = {k: {e["path"] for e in copies[k][0][0]["files"]} for k in copies}
        small_names = [n for n in contents[0] if not n.startswith(f"{SHARDS}/")]
        [small] = group.gather(
            [
                self._store().on(
                    leaders[intact[0][0]],
                    NodeStore.read,
                    0,
                    step,
                    [*small_names, META_FILE, MANIFEST],
                )
            ],
            what="read a checkpoint",
        )
        metadata = small[META_FILE]
        parse_metadata(metadata, where=f"node memory, step {step}")  # refuse a crafted one here
        needs = self._shards().role.each(ShardWriter.files_needed, metadata)
        calls = []
        for node, leader in enumerate(leaders):
            names = {META_FILE} | {f"{SHARDS}/{n}" for r in group.ranks_of(node) for n in needs[r]}
            local, remote = {}, defaultdict(list)
            for name in sorted(names):
                holding = [k for k in sorted(contents) if name in contents[k]]
                here = [k for k in holding if node in intact[k]]
                if here:
                    local[name] = here[0]
                else:
                    k = holding[0]
                    remote[(k, intact[k][0])].append(name)
            fetched = [
                self._store().on(leaders[at], NodeStore.read, k, step, names)
                for (k, at), names in remote.items()
            ]
            calls.append(
                self._store().on(leader, NodeStoreRole.assemble_fetched, step, local, fetched)
            )
        group.gather(calls, what="assemble a checkpoint from node memory")
        _write_files(into, {n: small[n] for n in [*small_names, MANIFEST]})
        manifest = parse_manifest(small[MANIFEST], where=f"node memory, step {step}")
        load_from = NodeDir(self.root, f"{RESTORE}/{step_name(step)}")
        return Restored(into, self.name, manifest, "memory tier of the nodes", load_from)

    def release(self) -> None:
        group = self._group()
        group.gather(
            [self._store().on(leader, NodeStore.drop_restored) for leader in group.leaders()],
            what="drop a restored checkpoint",
        )

    # --- helpers ----------------------------------------------------------------------

    def _group(self):
        if self.group is None:
            raise RuntimeError("NodeMemoryTier used before attach(group)")
        return self.group

    def _store(self):
        if self.store is None:
            raise RuntimeError("NodeMemoryTier used before attach(group)")
        return self.store

    def _shards(self) -> RankShards:
        if self.shards is None:
            raise RuntimeError("NodeMemoryTier used before attach(group)")
        return self.shards

    def _held(self) -> dict[tuple[int, str], dict[int, list[tuple[dict, int]]]]:
        """(step, save_id) -> part -> [(manifest, node index)] of every copy held."""
        group = self._group()
        listed = group.gather(
            [self._store().on(leader, NodeStore.held) for leader in group.leaders()],
            what="list memory",
        )
        held: dict[tuple[int, str], dict[int, list[tuple[dict, int]]]]
        held = defaultdict(lambda: defaultdict(list))
        for node, manifests in enumerate(listed):
            for m in manifests:
                held[(m["step"], m["save_id"])][m["part"]].append((m, node))
        return held

    def _intact(self, step: int, k: int, copies: list[tuple[dict, int]]) -> list[int]:
        """The nodes whose copy of part ``k`` of ``step`` checks out against its manifest."""
        group = self._group()
        leaders = group.leaders()
        problems = group.gather(
            [self._store().on(leaders[node], NodeStore.check, k, step) for _, node in copies],
            what="verify a memory checkpoint",
        )
        for (_, node), problem in zip(copies, problems, strict=True):
            if problem:
                logger.warning("node %d's copy of part %d, step %d: %s", node, k, step, problem)
        good = [node for (_, node), problem in zip(copies, problems, strict=True) if not problem]
        if not good:
            raise CheckpointError(f"part {k} of step {step} has no intact copy in node memory")
        return good
