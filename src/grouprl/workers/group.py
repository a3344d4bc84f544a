"""Worker groups: one instance of each role per rank, called by the driver.

    driver (the loop) ──Role.run("update", batch)──► rank 0 .. rank N-1 (every rank
                      ◄── rank 0's result ───────────  runs the same method: FSDP2
                      ──Role.rows("logprobs", batch)─►  collectives need them all)
                      ◄── the ranks' blocks, concatenated

``LocalGroup`` holds world size 1 in this process; ``RayGroup`` (dist/ray_group.py)
holds one Ray actor per rank. Roles are built with ``add(name, cls, **kwargs)`` as
``cls(Rank, **kwargs)`` on every rank.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from grouprl.config.schema import RunConfig
from grouprl.workers.rank import Rank


class WorkerGroup(Protocol):
    world_size: int

    def add(self, role: str, cls: type, **kwargs: Any) -> None: ...

    def call(self, role: str, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Runs ``method`` of ``role`` on every rank; the results in rank order."""
        ...

    def shards(self, roles: list[str]) -> Any:
        """The roles' checkpoint state: a ``state()`` callable or ranks' ``RemoteShards``
        (what ``Checkpointer.save`` takes)."""
        ...

    def close(self) -> None: ...


class LocalGroup:
    """World size 1: the roles live in this process."""

    world_size = 1

    def __init__(self, device: str) -> None:
        self.rank = Rank(0, 1, device)
        self.roles: dict[str, Any] = {}

    def add(self, role: str, cls: type, **kwargs: Any) -> None:
        self.roles[role] = cls(self.rank, **kwargs)

    def call(self, role: str, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        return [getattr(self.roles[role], method)(*args, **kwargs)]

    def shards(self, roles: list[str]) -> Callable[[], dict[str, Any]]:
        def state() -> dict[str, Any]:
            merged: dict[str, Any] = {}
            for role in roles:
                merged |= self.roles[role].state()
            return merged

        return state

    def close(self) -> None:
        self.roles.clear()


@dataclass(frozen=True)
class Role:
    """The driver's handle on one role of a group. ``bound``: keyword arguments every
    call gets (the KL reference of a LoRA policy is the policy with ``adapters=False``)."""

    group: WorkerGroup
    name: str
    bound: dict[str, Any] = field(default_factory=dict)

    def run(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Every rank runs ``method``; rank 0's result."""
        return self.group.call(self.name, method, *args, **self.bound, **kwargs)[0]

    def rows(self, method: str, *args: Any, **kwargs: Any) -> torch.Tensor:
        """Every rank computes its block of rows; the blocks concatenated in rank order."""
        return torch.cat(self.group.call(self.name, method, *args, **self.bound, **kwargs))


def make_group(cfg: RunConfig, *, run_dir) -> WorkerGroup:
    """In this process for world size 1, else Ray actors (``cluster`` section)."""
    if cfg.world_size == 1:
        from grouprl.device import resolve_device

        return LocalGroup(str(resolve_device(cfg.train.device)))
    from grouprl.workers.ray_group import RayGroup

    return RayGroup.start(cfg, run_dir=run_dir)
