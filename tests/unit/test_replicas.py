"""Rollout replicas behind one engine: whole groups split by expected work, per-sample
seeds that do not depend on the split, prompt order kept, every replica confirmed at
the pushed version, and a failing replica named."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest
import torch

from fake_engines import FakeEngine, replica_set
from grouprl.cluster.connection import WorkerFailed
from grouprl.config.schema import RunConfig
from grouprl.engines.base import SamplingSettings
from grouprl.engines.placement import slots
from grouprl.engines.push import stage
from grouprl.engines.replicas import ReplicaSet, Slot, split_by_work
from grouprl.types import Completion


class SeedEcho(FakeEngine):
    """An engine whose sample j of prompt i says which seed drew it and from what prompt
    (as a real engine's stream depends only on them)."""

    def __init__(self, delay: float = 0.0, fail: bool = False) -> None:
        super().__init__()
        self.delay, self.fail = delay, fail
        self.threads: set[str] = set()

    def generate(self, prompts, settings):
        self.calls.append(len(prompts))
        self.threads.add(threading.current_thread().name)
        time.sleep(self.delay)
        if self.fail:
            raise WorkerFailed("rollout replica 1 of 3 (node 10.0.0.2) failed during generate")
        return [
            [
                Completion(
                    token_ids=[settings.seed + i * settings.group_size + j, *p],
                    logprobs=[0.0],
                    finish_reason="stop",
                )
                for j in range(settings.group_size)
            ]
            for i, p in enumerate(prompts)
        ]


PROMPTS = [[7] * length for length in (3, 30, 4, 4, 25, 2, 9, 11, 5, 40)]
SETTINGS = SamplingSettings(group_size=3, seed=1000, max_tokens=8)


def test_the_samples_do_not_depend_on_the_number_of_replicas():
    one = replica_set([SeedEcho()]).generate(PROMPTS, SETTINGS)
    three_engines = [SeedEcho(), SeedEcho(), SeedEcho()]
    three = replica_set(three_engines).generate(PROMPTS, SETTINGS)
    assert three == one  # same seeds, same prompts, same order
    assert [len(e.calls) for e in three_engines] == [1, 1, 1]  # each generated its share
    # each completion says which replica drew it: the first runs of prompts on replica 0
    drawn_by = [g[0].replica for g in three]
    assert drawn_by == sorted(drawn_by) and set(drawn_by) == {0, 1, 2}
    assert {c.replica for g in one for c in g} == {0}
    assert sum(sum(e.calls) for e in three_engines) == len(PROMPTS)


def test_the_split_is_contiguous_whole_prompts_balanced_by_work():
    runs = split_by_work(PROMPTS, 3, max_tokens=8)
    assert [i for r in runs for i in r] == list(range(len(PROMPTS)))
    work = [sum(len(PROMPTS[i]) + 8 for i in r) for r in runs]
    assert max(work) - min(work) <= max(len(p) + 8 for p in PROMPTS)  # within one prompt
    assert split_by_work([[1]] * 2, 4, max_tokens=8) == [range(0, 1), range(1, 2)]
    assert split_by_work([], 2, max_tokens=8) == []


def test_each_replica_gets_its_prompts_own_max_tokens_and_seeds():
    class Lengths(SeedEcho):
        def generate(self, prompts, settings):
            self.seen = settings
            return super().generate(prompts, settings)

    each = tuple(range(1, len(PROMPTS) + 1))
    settings = replace(SETTINGS, max_tokens=max(each), max_tokens_each=each)
    engines = [Lengths(), Lengths(), Lengths()]
    out = replica_set(engines).generate(PROMPTS, settings)
    assert out == replica_set([SeedEcho()]).generate(PROMPTS, SETTINGS)  # seeds as without
    runs = split_by_work(PROMPTS, 3, max_tokens=each)
    for engine, run in zip(engines, runs, strict=True):
        assert engine.seen.max_tokens_each == each[run.start : run.stop]
        assert engine.seen.max_tokens == each[run.stop - 1]
        assert engine.seen.seed == SETTINGS.seed + run.start * SETTINGS.group_size


def test_replicas_generate_at_the_same_time():
    engines = [SeedEcho(delay=0.3), SeedEcho(delay=0.3)]
    t0 = time.perf_counter()
    replica_set(engines).generate(PROMPTS, SETTINGS)
    assert time.perf_counter() - t0 < 0.55
    assert engines[0].threads != engines[1].threads


def test_a_failing_replica_fails_the_call_naming_it_without_waiting_for_the_others():
    engines = [SeedEcho(delay=2.0), SeedEcho(fail=True), SeedEcho(delay=2.0)]
    t0 = time.perf_counter()
    with pytest.raises(WorkerFailed, match=r"rollout replica 1 of 3 \(node 10.0.0.2\)"):
        replica_set(engines).generate(PROMPTS, SETTINGS)
    assert time.perf_counter() - t0 < 1.5


def test_every_replica_must_report_the_pushed_version():
    engines = [SeedEcho(), SeedEcho()]
    replicas = replica_set(engines)
    replicas.update_weights([("w", torch.zeros(2))], version=3)
    assert replicas.weight_version == 3 and [e.version for e in engines] == [3, 3]
    with pytest.raises(WorkerFailed, match="replica 1 reports no push"):
        replicas.confirm(4, {0: 4})
    with pytest.raises(WorkerFailed, match="replica 0 reports 2"):
        replicas.confirm(4, {0: 2, 1: 4})
    assert replicas.weight_version == 3


def test_each_nodes_leader_pushes_to_the_replicas_on_its_node():
    engines = [SeedEcho() for _ in range(4)]
    replicas = ReplicaSet(
        engines, [Slot(k // 2, f"n{k // 2}", "ip") for k in range(4)], list("abcd")
    )
    targets = replicas.targets([0, 8])  # ranks 0-7 on node 0, 8-15 on node 1
    assert {rank: [k for k, _ in t] for rank, t in targets.items()} == {0: [0, 1], 8: [2, 3]}
    assert stage(targets[8], [{"w": torch.ones(1)}], version=5) == 4  # bytes moved
    assert [e.version for e in engines] == [0, 0, 0, 0]  # staged, not live
    assert replicas.targets([0]) == {0: list(enumerate(replicas.engines))}  # one process


def _cfg(**cluster) -> RunConfig:
    return RunConfig.model_validate(
        {"cluster": cluster, "rollout": {"engine": "vllm"}, "train": {"device": "cuda"}}
    )


def _places(nodes: int, per_node: int) -> list[dict]:
    return [
        {"node": f"node{r // per_node}", "ip": f"10.0.0.{r // per_node}", "gpus": [r % per_node]}
        for r in range(nodes * per_node)
    ]


def test_colocated_replicas_share_their_ranks_gpus_on_their_node():
    cfg = _cfg(nodes=2, gpus_per_node=8)
    assert cfg.rollout_replicas == 16 and cfg.rollout_in_actors
    placed = slots(cfg, _places(2, 8), on_gpu=True)
    assert [(s.node, s.gpus) for s in placed[7:9]] == [(0, (7,)), (1, (0,))]
    cfg.rollout.tensor_parallel_size = 2
    placed = slots(cfg, _places(2, 8), on_gpu=True)
    assert len(placed) == 8 and [s.gpus for s in placed[:2]] == [(0, 1), (2, 3)]
    assert [s.node for s in placed] == [0] * 4 + [1] * 4


def test_replicas_on_gpus_of_their_own_spread_over_the_nodes():
    cfg = _cfg(nodes=2, gpus_per_node=8)
    cfg.rollout.gpus = 2
    assert cfg.ranks_per_node == 6 and cfg.rollout_replicas == 4
    placed = slots(cfg, _places(2, 6), on_gpu=True)
    assert [(s.node, s.gpus) for s in placed] == [(0, ()), (0, ()), (1, ()), (1, ())]


def test_one_engine_in_the_driver_for_a_one_rank_cpu_run():
    cfg = RunConfig()
    assert cfg.rollout_replicas == 1 and not cfg.rollout_in_actors
    cfg.rollout.replicas = 2
    assert cfg.rollout_in_actors
