"""A push's stage from one process to many replicas (a node's leader training rank to
the replicas on its node): each bucket cast to the engines' dtype, one copy in the node's
object store read by every replica in an actor, ``IN_FLIGHT_BUCKETS`` at a time; engines
in this process stage each bucket as it comes. ``Staged`` is what it moved.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch
from torch import Tensor

from grouprl.engines.base import RolloutEngine

if TYPE_CHECKING:
    from ray import ObjectRef

    from grouprl.engines.actor_engine import Bucket


@dataclass(frozen=True)
class Staged:
    """What a node's leader rank staged: ``moved_bytes`` written to the node's object store
    or handed to engines in this process (once per node, whatever its replicas);
    ``weight_bytes`` the full weights in the engines' dtype (what an apply loads);
    ``lora_bases`` the replicas that were sent LoRA base weights."""

    moved_bytes: int = 0
    weight_bytes: int = 0
    lora_bases: frozenset[int] = frozenset()

    def __add__(self, other: Staged) -> Staged:
        return Staged(
            self.moved_bytes + other.moved_bytes,
            max(self.weight_bytes, other.weight_bytes),
            self.lora_bases | other.lora_bases,
        )


@runtime_checkable
class InActor(Protocol):
    """A replica in a Ray actor (``ActorEngine``): it stages a bucket from the object
    store, in a call that runs beside its generation."""

    def start_stage(
        self, weights: Bucket, version: int, *, last: bool, lora_scaling: float | None
    ) -> ObjectRef: ...

    def wait_stage(self, ref: ObjectRef, *, nbytes: int) -> int: ...


IN_FLIGHT_BUCKETS = 2
"""Buckets a push keeps in the object store at once: the next one is cast and written
while the replicas read the one before."""


def stage(
    targets: list[tuple[int, RolloutEngine]],
    buckets: Iterable[dict[str, Tensor]],
    *,
    version: int,
    dtype: torch.dtype | None = None,
    last: bool = True,
    lora_scaling: float | None = None,
    weight_bytes: int = 0,
) -> int:
    """Stages ``buckets`` (each a dict of named tensors; a generator may gather them one at
    a time) on ``targets`` (replica index, engine) from this process; returns the bytes
    moved. The replicas in actors read one copy of each bucket put in this node's object
    store, cast to ``dtype`` (the engines') before it is written there (a bfloat16
    engine's push moves half the bytes of float32), at most ``IN_FLIGHT_BUCKETS`` of
    them at once; engines in this process stage each bucket as it comes. ``last``: the
    push ends here (every replica checks that it got every weight; a LoRA push's last
    call stages the weights the replica keeps too: ``weight_bytes``, the full weights,
    bound its time)."""
    remote = [e for _, e in targets if isinstance(e, InActor)]
    local = [e for _, e in targets if not isinstance(e, InActor)]
    in_flight: deque[list[tuple[InActor, ObjectRef, int]]] = deque()
    moved = 0
    for bucket in buckets:
        size = sum(t.numel() * (dtype or t.dtype).itemsize for t in bucket.values())
        moved += size
        if remote:
            import ray

            ref = ray.put(
                {name: t.detach().to(dtype or t.dtype).cpu() for name, t in bucket.items()}
            )
            in_flight.append(
                [
                    (e, e.start_stage(ref, version, last=False, lora_scaling=lora_scaling), size)
                    for e in remote
                ]
            )
            del ref  # the stage calls hold the object until they are done
            while len(in_flight) >= IN_FLIGHT_BUCKETS:
                _wait(in_flight.popleft())
        for engine in local:
            engine.stage_weights(
                bucket.items(), version=version, last=False, lora_scaling=lora_scaling
            )
    while in_flight:
        _wait(in_flight.popleft())
    if last:  # every bucket is staged: each replica checks the whole push
        bound = max(moved, weight_bytes)
        _wait(
            [
                (e, e.start_stage({}, version, last=True, lora_scaling=lora_scaling), bound)
                for e in remote
            ]
        )
        for engine in local:
            engine.stage_weights([], version=version, last=True, lora_scaling=lora_scaling)
    return moved


def _wait(calls: list[tuple[InActor, ObjectRef, int]]) -> None:
    for engine, ref, nbytes in calls:
        engine.wait_stage(ref, nbytes=nbytes)
