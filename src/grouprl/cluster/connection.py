"""Joining a Ray cluster, starting actors on it, and saying in one line why a Ray call
failed: shared by the training ranks' worker group and the rollout engine's replicas.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grouprl.config.train import ClusterConfig

PLACEMENT_TIMEOUT_S = 120.0  # the cluster should have the resources by then
logger = logging.getLogger(__name__)


class ClusterError(RuntimeError):
    """A placement no Ray cluster here can give; the message says how to get one."""

    user_error = True


class WorkerFailed(RuntimeError):
    """A training rank raised or died; the message names it."""

    user_error = True  # the message says everything; a driver traceback adds nothing


def reason(err: Exception) -> str:
    """One line on why a Ray call failed: a dead process, or the remote exception."""
    import ray.exceptions as rex

    if isinstance(err, rex.ActorDiedError | rex.ActorUnavailableError):
        return "its process died (killed, out of memory, or its node was lost)"
    if isinstance(err, rex.RayTaskError):
        cause = err.cause if err.cause is not None else err
        return f"{type(cause).__name__}: {cause}"
    return f"{type(err).__name__}: {err}"


def connect(c: ClusterConfig, *, world_size: int, temp_dir: Path | None) -> None:
    """Joins ``cluster.address`` (or RAY_ADDRESS), else starts a Ray instance here."""
    import ray

    if ray.is_initialized():
        return
    address = c.address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, log_to_driver=True, logging_level=logging.WARNING)
        return
    check_local_ray(c, world_size=world_size)
    ray.init(
        num_cpus=max(2, int(c.cpus_per_worker * world_size)),
        include_dashboard=False,
        logging_level=logging.WARNING,
        _temp_dir=None if temp_dir is None else str(temp_dir),
    )


def check_local_ray(c: ClusterConfig, *, world_size: int) -> None:
    """Raises ``ClusterError`` when ``cluster.nodes`` > 1 but no Ray cluster is given
    (``cluster.address``, RAY_ADDRESS, or Ray already running in this process): the
    Ray that ``connect`` starts here has one node, and placing ranks on more would
    wait for nodes that never join. Needs no Ray, so ``train`` checks it first."""
    if c.nodes == 1 or c.address or os.environ.get("RAY_ADDRESS"):
        return
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        return
    per_node = "cluster.gpus_per_node" if c.gpus_per_node else "cluster.workers_per_node"
    raise ClusterError(
        f"cluster.nodes={c.nodes} places the {world_size} training ranks on {c.nodes} "
        "machines, but no Ray cluster is given (cluster.address and RAY_ADDRESS are "
        "unset), so grouprl would start a one-node Ray on this machine and wait for nodes "
        f"that never join. Fix: for {world_size} ranks on this machine set cluster.nodes=1 "
        f"{per_node}={world_size}; or start a Ray cluster (`ray start --head` on one "
        "machine, `ray start --address=HEAD:6379` on the others) and set "
        "cluster.address=HEAD:6379 (or RAY_ADDRESS), or run it there with `grouprl submit`."
    )


def start_actors(
    cls: type,
    each: Sequence[tuple[dict[str, Any], dict[str, Any], dict[str, str]]],
    *,
    concurrency_groups: dict[str, int] | None = None,
) -> list[Any]:
    """One Ray actor of ``cls`` per ``(options, kwargs, env)`` of ``each``, started at once,
    not waited for (a first call's result says it is up): ``.options(**options)``
    (resources, placement), ``env`` its extra environment variables, ``cls(**kwargs)``.
    ``concurrency_groups``: ``cls``'s (Ray takes them at ``ray.remote``)."""
    import ray

    remote = (
        ray.remote(cls)
        if concurrency_groups is None
        # Ray's overloads leave out this keyword of ray.remote (not one of .options())
        else ray.remote(concurrency_groups=concurrency_groups)(cls)  # pyright: ignore[reportCallIssue]
    )
    actors = []
    for options, kwargs, env in each:
        runtime = {"runtime_env": {"env_vars": env}} if env else {}
        actors.append(remote.options(**options, **runtime).remote(**kwargs))
    return actors


def actor_pid(_: object) -> int:
    """The process id of the actor it runs in: ``actor.__ray_call__.remote(actor_pid)``."""
    return os.getpid()


def log_started(summary: str, names: Sequence[str], pids: Sequence[int]) -> None:
    """One line naming each started actor with its process id (what a test or an operator
    kills it by)."""
    started = "; ".join(f"{name} pid {pid}" for name, pid in zip(names, pids, strict=True))
    logger.info("%s: %s", summary, started)
