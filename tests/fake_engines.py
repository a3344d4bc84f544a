"""Scripted rollout engines for the replica and partial-rollout tests
(tests/unit/test_replicas.py, tests/unit/test_partial.py), and the ReplicaSet over them.

A ``FakeEngine`` is what a ``ReplicaSet`` needs of an engine besides ``generate``: the
weight version a push sets, ``released`` and ``close``; each test's engine subclasses
it and scripts ``generate``, recording its calls in ``calls``.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext

from grouprl.engines.replicas import ReplicaSet, Slot


class FakeEngine:
    """An engine without a model: ``update_weights`` reads the tensors (as a push streams
    them) and takes the version; ``generate`` is the subclass's."""

    def __init__(self) -> None:
        self.calls: list = []
        self.version = 0

    @property
    def weight_version(self) -> int:
        return self.version

    def generate(self, prompts, settings):
        raise NotImplementedError(f"{type(self).__name__} scripts no generate")

    def update_weights(self, named_tensors, *, version: int) -> None:
        dict(named_tensors)
        self.version = version

    def released(self):
        """No memory to give back while the trainer runs."""
        return nullcontext()

    def close(self) -> None:
        """Nothing to free: no model, no process."""


def replica_set(
    engines: list,
    *,
    segment_tokens: int | None = None,
    decode: Callable[[list[int]], str] | None = None,
) -> ReplicaSet:
    """``engines`` as the replicas of one set, replica k on node ``n<k>``."""
    return ReplicaSet(
        engines,
        [Slot(k, f"n{k}", f"10.0.0.{k}") for k in range(len(engines))],
        [f"replica {k}" for k in range(len(engines))],
        segment_tokens=segment_tokens,
        decode=decode,
    )
