"""Training ranks as Ray actors, one per rank, in a placement group of one bundle per node.

    driver ──► placement group: bundle 0 (node A)      bundle 1 (node B) ...
                                WorkerHost rank 0, 1   WorkerHost rank 2, 3
               each host: torch.distributed (gloo on CPU, nccl on GPU, init at rank 0's
               address), then one instance of each role added to the group

A call runs on every rank at once; the driver waits for all of them and fails as soon
as one fails or its process dies, naming the rank and node, and kills the rest (a
survivor may be blocked in a collective with the dead rank). Collectives themselves
time out after ``cluster.collective_timeout_s``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from grouprl.cluster.connection import (
    PLACEMENT_TIMEOUT_S,
    WorkerFailed,
    connect,
    log_started,
    reason,
    start_actors,
)
from grouprl.config.schema import RunConfig
from grouprl.workers.group import Role, W, build_role
from grouprl.workers.rank import Rank, free_port, join_process_group


class WorkerHost:
    """The process of one rank (a Ray actor): joins the group, hosts the roles."""

    def __init__(self, *, rank: int, world_size: int, device: str, threads: int) -> None:
        import torch

        torch.set_num_threads(threads)
        self.rank = Rank(rank, world_size, device)
        self.roles: dict[str, Any] = {}

    def where(self) -> dict[str, Any]:
        import ray

        return {
            "ip": ray.util.get_node_ip_address(),
            "node": ray.get_runtime_context().get_node_id(),
            "pid": os.getpid(),
            "port": free_port(),
            "gpus": [int(g) for g in ray.get_gpu_ids()],
        }

    def join(self, *, init_method: str, backend: str, timeout_s: float) -> None:
        join_process_group(
            rank=self.rank.rank,
            world_size=self.rank.world_size,
            init_method=init_method,
            backend=backend,
            timeout_s=timeout_s,
        )

    def add(self, name: str, cls: type, uses: Sequence[str], kwargs: dict[str, Any]) -> None:
        self.roles[name] = build_role(cls, self.rank, self.roles, uses, kwargs)

    def call(self, name: str, method: Callable, args: tuple, kwargs: dict[str, Any]) -> Any:
        """``method`` on this rank's role ``name``; a ``NodeDir`` argument becomes the
        directory on this rank's node."""
        from grouprl.ckpt.node_tier import NodeDir

        args = tuple(a.here() if isinstance(a, NodeDir) else a for a in args)
        return method(self.roles[name], *args, **kwargs)

    def call_one(self, name: str, method: Callable, *args: object, **kwargs: object) -> Any:
        """``call`` with the arguments as Ray passes them (results of other calls arrive
        resolved)."""
        return self.call(name, method, args, kwargs)


class RayGroup:
    def __init__(
        self, hosts: list, places: list[dict[str, Any]], placement_group, *, per_node: int
    ) -> None:
        self.hosts, self.places, self.placement_group = hosts, places, placement_group
        self.world_size, self.per_node = len(hosts), per_node
        self.nodes = self.world_size // per_node

    def ranks_of(self, node: int) -> range:
        """The ranks of the group's ``node``-th node (its placement bundle)."""
        return range(node * self.per_node, (node + 1) * self.per_node)

    def leaders(self) -> list[int]:
        """The first rank of each node: the one that does the node's file work."""
        return [self.ranks_of(node)[0] for node in range(self.nodes)]

    @classmethod
    def start(cls, cfg: RunConfig, *, run_dir: Path) -> RayGroup:
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        c = cfg.cluster
        per_node, world = cfg.ranks_per_node, cfg.world_size
        connect(c, world_size=world, temp_dir=Path(run_dir).resolve() / "cache" / "ray")
        bundle = {"CPU": c.cpus_per_worker * per_node}
        if c.gpus_per_node:
            bundle["GPU"] = per_node
        bundles = placement_group(
            [dict(bundle) for _ in range(c.nodes)],
            strategy="STRICT_SPREAD" if c.nodes > 1 else "PACK",
        )
        _wait_for_placement(bundles, cfg, bundle)
        device = "cuda" if c.gpus_per_node else "cpu"
        threads = max(1, int(c.cpus_per_worker))
        # Ray actor handles: each method is called through its .remote (untyped proxies)
        hosts = start_actors(
            WorkerHost,
            [
                (
                    {
                        "num_cpus": c.cpus_per_worker,
                        "num_gpus": 1 if c.gpus_per_node else 0,
                        "scheduling_strategy": PlacementGroupSchedulingStrategy(
                            bundles, placement_group_bundle_index=rank // per_node
                        ),
                        "max_concurrency": 2,  # a checkpoint write runs beside the training calls
                    },
                    {"rank": rank, "world_size": world, "device": device, "threads": threads},
                    _worker_env(threads),
                )
                for rank in range(world)
            ],
        )
        workers = cls(hosts, [{"rank": r} for r in range(len(hosts))], bundles, per_node=per_node)
        workers.places = workers.gather([h.where.remote() for h in hosts], what="start")
        master = workers.places[0]
        init = f"tcp://{master['ip']}:{master['port']}"
        backend = "nccl" if c.gpus_per_node else "gloo"
        workers.gather(
            [
                h.join.remote(init_method=init, backend=backend, timeout_s=c.collective_timeout_s)
                for h in hosts
            ],
            what="join the process group",
        )
        nodes = {p["node"] for p in workers.places}
        log_started(
            f"{len(hosts)} training ranks ({backend}) on {len(nodes)} node(s)",
            [f"rank {r} {p['ip']}" for r, p in enumerate(workers.places)],
            [p["pid"] for p in workers.places],
        )
        return workers

    def add(
        self, name: str, cls: type[W], *, uses: Sequence[str] = (), **kwargs: object
    ) -> Role[W]:
        self.gather(
            [h.add.remote(name, cls, uses, kwargs) for h in self.hosts], what=f"build {name}"
        )
        return Role(self, name, cls)

    def call(self, name: str, method: Callable, *args: object, **kwargs: object) -> list[Any]:
        import ray

        args_ref, kwargs_ref = ray.put(args), ray.put(kwargs)
        refs = [h.call.remote(name, method, args_ref, kwargs_ref) for h in self.hosts]
        return self.gather(refs, what=f"{name}.{method.__name__}")

    def submit(self, rank: int, name: str, method: Callable, *args: object, **kwargs: object):
        return self.hosts[rank].call_one.remote(name, method, *args, **kwargs)

    def close(self) -> None:
        """Kills the ranks and frees their placement; safe to call twice."""
        import ray
        from ray.util.placement_group import remove_placement_group

        if not self.hosts:
            return
        for host in self.hosts:
            ray.kill(host)
        self.hosts = []
        remove_placement_group(self.placement_group)

    # --- failures ---------------------------------------------------------------------

    def gather(self, refs: list, *, what: str) -> list[Any]:
        """All results in rank order; the first failure kills the group and raises."""
        import ray

        index = {ref: rank for rank, ref in enumerate(refs)}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            try:
                ray.get(done[0])
            except Exception as err:
                rank = index[done[0]]
                place = self.places[rank] if rank < len(self.places) else {}
                where = f"node {place.get('ip', '?')}, pid {place.get('pid', '?')}"
                self.close()
                raise WorkerFailed(
                    f"training rank {rank} of {len(refs)} ({where}) failed during {what}: "
                    f"{reason(err)}. The other ranks were stopped. Restart the run with "
                    "trainer.resume=auto to continue from its last checkpoint."
                ) from None
        return ray.get(refs)


def _worker_env(threads: int) -> dict[str, str]:
    env = {"OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false"}
    for key in ("HF_HUB_OFFLINE", "HF_HOME", "TRANSFORMERS_VERBOSITY"):
        if key in os.environ:
            env[key] = os.environ[key]
    return env


def _wait_for_placement(group, cfg: RunConfig, bundle: dict[str, float]) -> None:
    import ray

    c = cfg.cluster
    start = time.monotonic()
    ready = group.ready()
    done, _ = ray.wait([ready], timeout=PLACEMENT_TIMEOUT_S)
    if done:
        return
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    have = ", ".join(
        f"{n.get('NodeManagerAddress')}: {n['Resources'].get('CPU', 0):g} CPU "
        f"{n['Resources'].get('GPU', 0):g} GPU"
        for n in nodes
    )
    raise WorkerFailed(
        f"the Ray cluster cannot place {c.nodes} node(s) x {bundle} (cluster.nodes="
        f"{c.nodes}, {cfg.ranks_per_node} ranks per node, cluster.cpus_per_worker="
        f"{c.cpus_per_worker}, cluster.gpus_per_node={c.gpus_per_node}) after "
        f"{time.monotonic() - start:.0f} s; it has {len(nodes)} node(s): {have}. Lower "
        "those keys or add nodes"
        + (
            f" (all {cfg.world_size} ranks on one node: cluster.nodes=1 "
            f"cluster.{'gpus' if c.gpus_per_node else 'workers'}_per_node={cfg.world_size})."
            if len(nodes) < c.nodes
            else "."
        )
    )
