"""``benchmarks/rollout_replicas.py``'s smoke runs (test_benchmarks.py has the others and
the helpers), on the session's 2-node Ray cluster. In a file of their own that sorts after
test_ray_cluster.py, so the cluster starts where the Ray tests start it and does not sit
idle, taking CPU, through the integration tests in between."""

from __future__ import annotations

import pytest
from test_benchmarks import REPLICAS, VLLM_ONLY_IN_LONG, check, run


@pytest.mark.ray
def test_rollout_replicas_smoke(ray_cluster):
    """On the session's 2-node cluster: 1 then 2 hf-engine replicas in actors."""
    check(REPLICAS, run(REPLICAS, "--address", ray_cluster.address))


@pytest.mark.ray
@pytest.mark.slow
@VLLM_ONLY_IN_LONG
def test_rollout_replicas_vllm_smoke(ray_cluster):
    check(REPLICAS, run(REPLICAS, "--address", ray_cluster.address, "--engine", "vllm"))
