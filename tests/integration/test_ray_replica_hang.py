"""A hung rollout replica (alive, answering nothing) fails its generation call within the
call's bound (``config/replica_timeouts.py``), naming the replica, on the session's 2-node
Ray cluster. In a file that sorts after test_ray_cluster.py, as test_ray_replicas_smoke.py
explains; this process joins the cluster, and leaves it at the end."""

from __future__ import annotations

import os
import re
import signal
import time
from contextlib import suppress

import pytest

from grouprl.cluster.connection import (
    WorkerFailed,
    actor_pid,  # importable in the actor
)
from grouprl.engines.base import SamplingSettings
from ray_cluster import actor_replicas

TIMEOUT_S = 3.0


@pytest.mark.ray
def test_a_stopped_replica_fails_the_generation_within_its_bound_naming_it(
    ray_cluster, tiny_model_dir, tmp_path
):
    """Two hf-engine replicas generate; replica 1's process is then stopped (SIGSTOP: alive,
    so Ray sees nothing wrong) and the next generation fails after rollout.timeout_s,
    naming replica 1 and its node, and the stopped actor is killed."""
    import ray

    overrides = ["rollout.replicas=2", f"rollout.timeout_s={TIMEOUT_S:g}"]
    prompts, settings = [[1, 2, 3], [4, 5, 6]], SamplingSettings(group_size=2, max_tokens=4)
    with actor_replicas(
        ray_cluster, model_dir=tiny_model_dir, cache_dir=str(tmp_path), overrides=overrides
    ) as engines:
        assert [len(group) for group in engines.generate(prompts, settings)] == [2, 2]
        stopped = engines.engines[1]
        pid = ray.get(stopped.actor.__ray_call__.remote(actor_pid))
        os.kill(pid, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            with pytest.raises(WorkerFailed) as failed:
                engines.generate(prompts, settings)
            waited = time.monotonic() - t0
            assert TIMEOUT_S <= waited < TIMEOUT_S + 10, waited
            message = str(failed.value)
            assert re.fullmatch(
                r"rollout replica 1 of 2 \(node [^)]+\) did not finish a generation within 3 s "
                r"\(rollout\.timeout_s=3; raise it if the replica is slow\): stopped it",
                message,
            ), message
            with pytest.raises(ray.exceptions.RayActorError):  # killed, not left stopped
                ray.get(stopped.actor.__ray_call__.remote(actor_pid), timeout=30)
        finally:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
