"""A rollout replica in a Ray actor stages a weight push while it generates (the actor's
``push`` concurrency group), and the push goes live only at the apply, after the
generation, on the session's 2-node Ray cluster. In a file that sorts after
test_ray_cluster.py, as test_ray_replicas_smoke.py explains; this process joins the
cluster, and leaves it at the end."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from grouprl.engines.base import SamplingSettings
from grouprl.engines.push import stage
from ray_cluster import actor_replicas


@pytest.mark.ray
@pytest.mark.slow  # ~20 s: a replica actor's start and a long generation
def test_a_replica_stages_a_push_while_it_generates(ray_cluster, tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    weights = {n: p.detach() * 1.01 for n, p in model.named_parameters()}
    long = SamplingSettings(group_size=4, max_tokens=200, ignore_eos=True, seed=1)
    with actor_replicas(ray_cluster, model_dir=tiny_model_dir, cache_dir=str(tmp_path)) as engines:
        done: list[float] = []
        generating = threading.Thread(
            target=lambda: (engines.generate([[1, 2, 3]] * 8, long), done.append(time.time()))
        )
        generating.start()
        time.sleep(0.5)  # the generation call has reached the actor
        [(_, replica)] = engines.targets([0])[0]
        moved = stage([(0, replica)], [weights], version=1)
        staged_at = time.time()
        assert generating.is_alive(), "the generation ended before the stage: make it longer"
        assert moved == sum(t.numel() * 4 for t in weights.values())
        engines.apply_weights(1)  # under the push gate: after the generation
        assert done and done[0] <= time.time() and staged_at < done[0]
        assert engines.weight_version == 1
        generating.join()
