"""Worker groups: one instance of each role per rank, called by the driver.

    driver ──policy.call(PolicyWorker.update, batch)──► rank 0 .. rank N-1 (every rank
           ◄── rank 0's result ─────────────────────────  runs the same method: FSDP2
           ──policy.gather(PolicyWorker.logprobs, batch)►  collectives need them all)
           ◄── the ranks' blocks, concatenated

A call names the worker method itself, not a string: ``Role.call`` is typed with the
method's own parameters (ParamSpec), so a misspelt method or argument fails in the
type checker, and a method of another class fails in the driver before any rank runs.

``LocalGroup`` holds world size 1 in this process; ``RayGroup`` (``ray_group.py``)
holds one Ray actor per rank. ``add(name, cls, **kwargs)`` builds ``cls(Rank,
**kwargs)`` on every rank (``uses``: other roles of the rank it works on, passed as
``parts``) and returns the driver's ``Role`` handle.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar

import torch

from grouprl.workers.rank import Rank

P = ParamSpec("P")
R = TypeVar("R")
W = TypeVar("W")
Method = Callable[..., Any]
"""A role's method, called on every rank (``Role`` checks it is one of the role's class)."""


class WorkerGroup(Protocol):
    world_size: int
    places: list[dict[str, Any]]
    """Where each rank runs (Ray ``node`` id, ``ip``, ``gpus``); empty in this process."""

    def leaders(self) -> list[int]:
        """The first rank of each node, in node order."""
        ...

    def add(
        self, name: str, cls: type[W], *, uses: Sequence[str] = (), **kwargs: object
    ) -> Role[W]:
        """Builds ``cls`` on every rank as role ``name``."""
        ...

    def call(self, name: str, method: Method, *args: object, **kwargs: object) -> list[Any]:
        """Runs ``method`` on role ``name`` of every rank; the results in rank order."""
        ...

    def submit(self, rank: int, name: str, method: Method, *args: object, **kwargs: object):
        """Starts ``method`` on one rank only; ``gather`` collects what this returns (a
        Ray group's results may be passed on to another ``submit`` unresolved)."""
        ...

    def gather(self, started: list[Any], /, *, what: str) -> list[Any]: ...

    def close(self) -> None: ...


def build_role(
    cls: Callable[..., W],
    rank: Rank,
    roles: dict[str, Any],
    uses: Sequence[str],
    kwargs: dict[str, Any],
) -> W:
    """``cls(rank, **kwargs)``, with ``parts=[...]`` the rank's roles named in ``uses``."""
    if uses:
        kwargs = kwargs | {"parts": [roles[name] for name in uses]}
    return cls(rank, **kwargs)


class LocalGroup:
    """World size 1: the roles live in this process."""

    world_size = 1

    def __init__(self, device: str) -> None:
        self.rank = Rank(0, 1, device)
        self.roles: dict[str, Any] = {}
        self.places: list[dict[str, Any]] = []

    def leaders(self) -> list[int]:
        return [0]

    def add(
        self, name: str, cls: type[W], *, uses: Sequence[str] = (), **kwargs: object
    ) -> Role[W]:
        self.roles[name] = build_role(cls, self.rank, self.roles, uses, kwargs)
        return Role(self, name, cls)

    def call(self, name: str, method: Method, *args: object, **kwargs: object) -> list[Any]:
        return [method(self.roles[name], *args, **kwargs)]

    def submit(self, rank: int, name: str, method: Method, *args: object, **kwargs: object):
        return method(self.roles[name], *args, **kwargs)

    def gather(self, started: list[Any], *, what: str) -> list[Any]:
        return started

    def close(self) -> None:
        self.roles.clear()


@dataclass(frozen=True)
class Role(Generic[W]):
    """The driver's handle on one role of a group: ``cls`` is the class every rank built."""

    group: WorkerGroup
    name: str
    cls: type[W]

    def call(self, method: Callable[Concatenate[W, P], R], *args: P.args, **kwargs: P.kwargs) -> R:
        """Every rank runs ``method``; rank 0's result."""
        return self.each(method, *args, **kwargs)[0]

    def each(
        self, method: Callable[Concatenate[W, P], R], *args: P.args, **kwargs: P.kwargs
    ) -> list[R]:
        """Every rank runs ``method``; every rank's result, in rank order."""
        return self.group.call(self.name, self.check(method), *args, **kwargs)

    def gather(
        self, method: Callable[Concatenate[W, P], torch.Tensor], *args: P.args, **kwargs: P.kwargs
    ) -> torch.Tensor:
        """Every rank computes its block of rows; the blocks concatenated in rank order."""
        return torch.cat(self.each(method, *args, **kwargs))

    def on(
        self, rank: int, method: Callable[Concatenate[W, P], R], *args: P.args, **kwargs: P.kwargs
    ) -> Any:
        """Starts ``method`` on ``rank`` alone (a node's file work on its first rank); the
        group's ``gather`` collects the results."""
        return self.group.submit(rank, self.name, self.check(method), *args, **kwargs)

    def check(self, method: Callable[..., Any]) -> Callable[..., Any]:
        """``method`` itself, if it is one of ``cls``'s; else a TypeError here, in the
        driver, before any rank runs it."""
        if inspect.getattr_static(self.cls, getattr(method, "__name__", ""), None) is not method:
            raise TypeError(
                f"{method!r} is not a method of {self.cls.__name__}, the class of role "
                f"{self.name!r}"
            )
        return method
