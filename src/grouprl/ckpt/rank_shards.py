"""The checkpoint role of a worker group: each rank stages and writes its own shards.

    driver: Checkpointer.save ──stage──► every rank: ShardWriter.stage (host copy of its
                                          roles' state; the loop waits for this)
            writer thread ──────write──► every rank: ShardWriter.write (DCP shards, on its
                                          own gloo group, beside the training collectives)

``ShardWriter`` is built on every rank beside the roles it saves (``parts``: the
policy, and the critic when there is one). ``RankShards`` is the driver's side: the
``Shards`` a ``Snapshot`` carries when the state stays with the ranks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grouprl.ckpt.shards import files_needed, parse_metadata
from grouprl.ckpt.snapshot import StagedShards


class ShardWriter:
    """One rank's checkpoint work. ``parts``: the roles whose ``state()`` it saves."""

    def __init__(self, rank, *, parts: list[Any]) -> None:
        self.parts = parts
        process_group = None
        if rank.distributed:  # writes run beside training collectives: a group of their own
            import torch.distributed as dist

            process_group = dist.new_group(backend="gloo")
        self.staged = StagedShards(process_group=process_group)

    def state(self) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for part in self.parts:
            merged |= part.state()
        return merged

    def stage(self) -> int:
        """Copies this rank's state into host buffers; returns its bytes."""
        return self.staged.stage(self.state())

    def write(self, out: str) -> None:
        self.staged.write(Path(out))

    def files_needed(self, metadata: bytes) -> set[str]:
        """The shard files this rank reads to restore its state (DCP's load plan)."""
        return files_needed(self.state(), parse_metadata(metadata, where="node memory"))


class RankShards:
    """Shards that stay with their ranks (``role``: their ``ShardWriter``s). A plain
    ``write`` puts every rank's shards in one directory, which must be on a filesystem
    every node sees."""

    def __init__(self, role) -> None:
        self.role = role  # a workers.group.Role[ShardWriter]

    def stage(self) -> int:
        return sum(self.role.each(ShardWriter.stage))

    def write(self, out: Path) -> None:
        self.role.each(ShardWriter.write, str(out))

    def write_parts(self, dirs: list[str], ranks_of) -> None:
        """Each node's ranks (``ranks_of(node)``) write their shards into ``dirs[node]``,
        a path on that node."""
        started = [
            self.role.on(rank, ShardWriter.write, out)
            for node, out in enumerate(dirs)
            for rank in ranks_of(node)
        ]
        self.role.group.gather(started, what="write shards")
