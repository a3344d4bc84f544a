"""Rollout engine replicas behind one engine: the loop sees a single ``RolloutEngine``
whatever their number.

    generate(P prompts) ─► split into contiguous runs of whole prompts (groups), balanced
                           by expected work (each run with its prompts' max_tokens) ─►
                           replica 0 .. R-1 at once ─► joined in prompt order
    weights (v) ─► stage: each node's leader training rank stages the weights in buckets
                   on the replicas on its node while they generate (``engines/push.py``)
               ─► apply (under the push gate): every replica makes them live and
                   reports v before generation resumes
    pushing() ─► the push gate: a push made while generations run waits for the segments
                 in flight on every replica and holds new ones off (``engines/segments.py``:
                 generation in segments, each token tagged with its weight version)

A run of prompts starting at i0 is sent with prompt i0's request seed
(``seeds.request_seed``), so each sample draws the same stream whichever replica
generates it and however many there are.

Replicas are Ray actors (``ActorEngine``) placed and started by ``engines/placement.py``,
or one engine in the driver for a one-rank run (``placement.in_driver``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, replace
from itertools import pairwise
from typing import TypeVar

from grouprl.engines.base import (
    NamedTensors,
    OnGroup,
    RolloutEngine,
    SamplingSettings,
    TwoStepPush,
    two_step,
)
from grouprl.engines.push import Staged, stage
from grouprl.engines.segments import PushGate, generate_in_segments, tag_versions
from grouprl.seeds import request_seed
from grouprl.types import Completion

logger = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class Slot:
    """Where one replica runs: a Ray node (its index among the training ranks' nodes)
    and, when colocated, the GPUs of the training ranks it shares."""

    node: int
    node_id: str
    ip: str
    gpus: tuple[int, ...] = ()


def split_by_work(
    prompts: Sequence[Sequence[int]], parts: int, *, max_tokens: int | Sequence[int]
) -> list[range]:
    """Contiguous runs of prompts, at most ``parts`` of them, each close to an equal share
    of the expected work (a prompt's tokens plus the tokens it may generate: ``max_tokens``,
    or each prompt's; every prompt has the same ``n``). Empty runs are left out."""
    each = [max_tokens] * len(prompts) if isinstance(max_tokens, int) else list(max_tokens)
    costs = [len(p) + m for p, m in zip(prompts, each, strict=True)]
    total, bounds, acc = sum(costs), [0], 0
    for i, cost in enumerate(costs):
        # a prompt goes to the next run when most of it lies past this run's share
        if len(bounds) < parts and i > bounds[-1] and acc + cost / 2 > total * len(bounds) / parts:
            bounds.append(i)
        acc += cost
    bounds.append(len(prompts))
    return [range(a, b) for a, b in pairwise(bounds) if b > a]


class ReplicaSet(TwoStepPush):
    """``engines[k]`` runs on ``slots[k]``; ``names[k]`` is what messages call it.

    Every generation runs under the push gate (``pushing``: a weight push waits for the
    segments in flight, and new ones wait for it), in one segment, or in segments of at
    most ``segment_tokens`` tokens (``rollout.partial_rollout_tokens``: partial rollouts,
    ``engines/segments.py``); every token it returns carries the weight version that
    sampled it (``Completion.versions``). ``decode`` (the tokenizer's, special tokens
    skipped as the engines do) decodes a completion made of several segments whole;
    ``max_model_len`` (the engines') finishes a sample whose prefix fills it."""

    def __init__(
        self,
        engines: Sequence[RolloutEngine],
        slots: list[Slot],
        names: list[str],
        *,
        segment_tokens: int | None = None,
        decode: Callable[[list[int]], str] | None = None,
        max_model_len: int | None = None,
    ) -> None:
        self.engines = [two_step(engine) for engine in engines]
        self.slots, self.names = slots, names
        self.segment_tokens, self.decode = segment_tokens, decode
        self.max_model_len = max_model_len
        self._gate = PushGate()
        self._samples, self._seconds = [0] * len(engines), [0.0] * len(engines)
        self._segments = self._spanning = 0
        # twice the replicas: a generation ahead (rollout.max_staleness) and the training
        # step's release of the engines never wait for each other's threads
        self._pool = ThreadPoolExecutor(max_workers=2 * len(engines), thread_name_prefix="replica")
        self.lora_bases: set[int] = set()
        """The replicas that keep LoRA base weights (``rollout.lora_push=adapters``): a push
        to the others ships the base too (``engines/lora_push.py``)."""

    def __len__(self) -> int:
        return len(self.engines)

    def generate(
        self,
        prompts: list[list[int]],
        settings: SamplingSettings,
        on_group: OnGroup | None = None,
    ) -> list[list[Completion]]:
        """``RolloutEngine.generate`` over the replicas, with each token's weight version;
        in segments with ``segment_tokens``, else in one under the push gate (then the
        engine calls are exactly those of a plain generation). ``on_group(i, group)``, on
        a replica's thread, as prompt i's group finishes: on an engine that streams groups
        (``streams_groups``: vLLM in this process) as each does, on another as its
        replica's share does, in segments once the last segment has."""
        if self.segment_tokens is None:
            with self._gate.segment():
                version = self.weight_version
                groups = self._generate_once(
                    prompts, settings, new_samples=True, on_group=on_group, version=version
                )
            tag_versions(groups, version)
            self._segments += 1
            return groups
        first = True

        def call(batch: list[list[int]], share: SamplingSettings) -> list[list[Completion]]:
            nonlocal first
            out = self._generate_once(batch, share, new_samples=first)
            first = False
            return out

        groups, segments = generate_in_segments(
            call,
            prompts,
            settings,
            segment_tokens=self.segment_tokens,
            segment=self._gate.segment,
            version=lambda: self.weight_version,
            decode=self.decode,
            max_model_len=self.max_model_len,
        )
        self._segments += segments
        self._spanning += sum(len(set(c.versions)) > 1 for group in groups for c in group)
        for i, group in enumerate(groups if on_group is not None else []):
            on_group(i, group)  # type: ignore[misc]  # on_group is not None here
        return groups

    @contextmanager
    def pushing(self) -> Iterator[None]:
        """Wrap every weight push made while generations may run: waits until no
        generation segment is in flight on any replica, and holds new segments off until
        the block ends (a push that waits goes before segments that start after it)."""
        with self._gate.pushing():
            yield

    def aborting(self) -> AbstractContextManager[None]:
        """Inside the block, every generation stops after its segment in flight on every
        replica (``engines/segments.GenerationAborted``): the rollout stream closing."""
        return self._gate.aborting()

    @property
    def pushes_waiting(self) -> int:
        """Pushes waiting for the generation segments in flight to finish."""
        return self._gate.pushes_waiting

    def _generate_once(
        self,
        prompts: list[list[int]],
        settings: SamplingSettings,
        *,
        new_samples: bool,
        on_group: OnGroup | None = None,
        version: int = 0,
    ) -> list[list[Completion]]:
        """One engine call split over the replicas; ``new_samples``: count its samples in
        the per-replica metrics (a continuation segment's are counted already);
        ``on_group``: ``generate``'s, each group tagged with its replica and ``version``
        first."""
        max_tokens = settings.prompt_max_tokens(len(prompts))
        runs = split_by_work(prompts, len(self.engines), max_tokens=max_tokens)

        def run(k: int) -> list[list[Completion]]:
            part, t0 = runs[k], time.perf_counter()
            seed = request_seed(settings.seed, part.start, settings.group_size)
            each = settings.max_tokens_each
            share = replace(
                settings,
                seed=seed,
                max_tokens=max(max_tokens[part.start : part.stop]),
                max_tokens_each=None if each is None else each[part.start : part.stop],
            )

            def finished(i: int, group: list[Completion]) -> None:
                for completion in group:
                    completion.replica = k
                tag_versions([group], version)
                on_group(part.start + i, group)  # type: ignore[misc]  # not None here

            engine, batch = self.engines[k], prompts[part.start : part.stop]
            if on_group is not None and getattr(engine, "streams_groups", False):
                groups = engine.generate(batch, share, on_group=finished)  # type: ignore[call-arg]
            else:
                groups = engine.generate(batch, share)
                for i, group in enumerate(groups if on_group is not None else []):
                    finished(i, group)
            for completion in (c for group in groups for c in group):
                completion.replica = k
            if new_samples:
                self._samples[k] += len(part) * settings.group_size
            self._seconds[k] += time.perf_counter() - t0
            return groups

        return [group for groups in self._each(run, count=len(runs)) for group in groups]

    def drain_metrics(self) -> dict[str, float]:
        """Since the last call: samples and seconds each replica generated (with more than
        one replica: how evenly the work spread); the segments generated, the samples whose
        tokens span weight versions and the seconds pushes waited for segments in flight
        (with ``segment_tokens``)."""
        out: dict[str, float] = {}
        if self.segment_tokens is not None:
            out["rollout/segments"] = float(self._segments)
            out["rollout/spanning_samples"] = float(self._spanning)
            out["rollout/push_wait_s"] = self._gate.wait_s
        self._segments = self._spanning = 0
        self._gate.wait_s = 0.0
        if len(self.engines) > 1:
            for k in range(len(self.engines)):
                out[f"replica/{k}/samples"] = float(self._samples[k])
                out[f"replica/{k}/generate_s"] = self._seconds[k]
        self._samples, self._seconds = [0] * len(self.engines), [0.0] * len(self.engines)
        return out

    def _stage(
        self, named_tensors: NamedTensors, *, version: int, last: bool, lora_scaling: float | None
    ) -> None:
        """Stages the tensors on every replica from this process, as one bucket (a run's
        pushes come from the training ranks instead: ``targets``, ``push.stage``)."""
        stage(
            list(enumerate(self.engines)),
            [dict(named_tensors)],
            version=version,
            last=last,
            lora_scaling=lora_scaling,
        )

    def apply_weights(self, version: int, *, nbytes: int = 0, staged: Staged | None = None) -> None:
        """Every replica makes its staged push of ``version`` live, under the push gate
        (generation segments in flight finish first; none starts meanwhile), and must
        then report ``version`` (``confirm``). ``staged``: what the stage reported (its
        ``weight_bytes`` bound a replica's apply, as ``nbytes`` does; a LoRA base push
        marks the replicas that hold a base now)."""
        nbytes = max(nbytes, staged.weight_bytes if staged is not None else 0)

        def apply(k: int) -> int:
            self.engines[k].apply_weights(version, nbytes=nbytes)
            return self.engines[k].weight_version

        with self.pushing():
            try:
                reported = dict(enumerate(self._each(apply)))
            except BaseException:
                self.lora_bases.clear()  # a replica may have failed half-way: ship bases again
                raise
            self.confirm(version, reported)
        if staged is not None:
            self.lora_bases |= staged.lora_bases

    def targets(self, leaders: Sequence[int]) -> dict[int, list[tuple[int, RolloutEngine]]]:
        """The replicas each node's leader rank pushes to: ``leaders[i]`` is the first
        rank of the training ranks' ``i``-th node."""
        out: dict[int, list[tuple[int, RolloutEngine]]] = {rank: [] for rank in leaders}
        for k, (engine, slot) in enumerate(zip(self.engines, self.slots, strict=True)):
            out[leaders[min(slot.node, len(leaders) - 1)]].append((k, engine))
        return out

    def confirm(self, version: int, reported: dict[int, int]) -> None:
        """Every replica serves ``version`` now (``reported``: replica -> version), or the
        step fails naming the ones that do not."""
        wrong = [
            f"{self.names[k]} reports {reported.get(k, 'no push')}"
            for k in range(len(self.engines))
            if reported.get(k) != version
        ]
        if wrong:
            from grouprl.cluster.connection import WorkerFailed

            raise WorkerFailed(f"after the push of weight version {version}: {'; '.join(wrong)}")
        self._version = version

    @contextmanager
    def released(self) -> Iterator[None]:
        contexts = [engine.released() for engine in self.engines]
        self._each(lambda k: contexts[k].__enter__())
        try:
            yield
        finally:
            self._each(lambda k: contexts[k].__exit__(None, None, None))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        for name, engine in zip(self.names, self.engines, strict=True):
            try:
                engine.close()
            except Exception as err:  # the others still get closed; the run is ending
                logger.warning("closing %s: %s", name, err)
        self.engines = []

    def _each(self, fn: Callable[[int], T], *, count: int | None = None) -> list[T]:
        """``fn(k)`` for replicas 0 .. count-1 at once; the first failure is raised as
        soon as it happens (it names its replica)."""
        count = len(self.engines) if count is None else count
        if count == 1:
            return [fn(0)]
        futures = [self._pool.submit(fn, k) for k in range(count)]
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        for future in futures:
            if future in done and future.exception() is not None:
                raise future.exception()  # type: ignore[misc]
        return [future.result() for future in futures]
