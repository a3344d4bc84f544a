"""Joining a Ray cluster, and saying in one line why a Ray call failed: shared by the
training ranks' worker group and the rollout engine's actor.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from grouprl.config.schema import ClusterConfig

PLACEMENT_TIMEOUT_S = 120.0  # the cluster should have the resources by then


class WorkerFailed(RuntimeError):
    """A training rank raised or died; the message names it."""

    user_error = True  # the message says everything; a driver traceback adds nothing


def reason(err: Exception) -> str:
    """One line on why a Ray call failed: a dead process, or the remote exception."""
    import ray.exceptions as rex

    if isinstance(err, rex.ActorDiedError | rex.ActorUnavailableError):
        return "its process died (killed, out of memory, or its node was lost)"
    if isinstance(err, rex.RayTaskError):
        cause = err.cause if getattr(err, "cause", None) is not None else err
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
    ray.init(
        num_cpus=max(2, int(c.cpus_per_worker * world_size)),
        include_dashboard=False,
        logging_level=logging.WARNING,
        _temp_dir=None if temp_dir is None else str(temp_dir),
    )
