"""Weight pushes in two halves: staged (bucket by bucket, while the engine generates), then
applied under the push gate; and LoRA adapter-only pushes that the engine merges into the
base weights it keeps."""

from __future__ import annotations

import threading
import time
from contextlib import nullcontext

import pytest
import torch

from grouprl.config.loader import load_config
from grouprl.engines.base import SamplingSettings
from grouprl.engines.hf_engine import HFEngine
from grouprl.engines.push import stage
from grouprl.engines.replicas import ReplicaSet, Slot
from grouprl.types import Completion
from grouprl.workers.policy import PolicyWorker
from grouprl.workers.rank import Rank
from grouprl.workers.weight_export import weight_buckets


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


def _moved(model, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {
        name: p.detach() + 0.01 * torch.randn(p.shape, generator=gen)
        for name, p in model.named_parameters()
    }


def _params(engine: HFEngine) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in engine.model.named_parameters()}


def test_staged_weights_are_not_live_until_applied(model, tokenizer):
    engine = HFEngine(model, tokenizer, device="cpu")
    before, new = _params(engine), _moved(model, 0)
    names = list(new)
    engine.stage_weights([(n, new[n]) for n in names[:3]], version=4, last=False)
    engine.stage_weights([(n, new[n]) for n in names[3:]], version=4, last=True)
    assert all(torch.equal(p, before[n]) for n, p in _params(engine).items())
    assert engine.weight_version == 0
    engine.apply_weights(4)
    assert all(torch.equal(p, new[n]) for n, p in _params(engine).items())
    assert engine.weight_version == 4
    with pytest.raises(RuntimeError, match=r"apply_weights\(4\).*stage_weights"):
        engine.apply_weights(4)  # a stage is applied once


def test_a_stage_missing_a_parameter_fails_before_anything_is_applied(model, tokenizer):
    engine = HFEngine(model, tokenizer, device="cpu")
    before, new = _params(engine), _moved(model, 1)
    first = next(iter(new))
    with pytest.raises(ValueError, match="misses parameters"):
        engine.stage_weights([(n, t) for n, t in new.items() if n != first], version=1)
    with pytest.raises(RuntimeError, match="nothing staged"):
        engine.apply_weights(1)
    assert all(torch.equal(p, before[n]) for n, p in _params(engine).items())


@pytest.fixture(scope="module")
def policy(tiny_model_dir) -> PolicyWorker:
    cfg = load_config("tiny-arith", [f"model.path={tiny_model_dir}", "train.device=cpu"])
    return PolicyWorker(Rank(0, 1, "cpu"), cfg=cfg, learning_steps=1)


def test_buckets_hold_at_most_their_bound_and_a_larger_tensor_goes_alone(policy):
    whole = policy.weights()
    assert whole is not None
    sizes = {n: t.numel() * t.element_size() for n, t in whole.items()}
    bound = sorted(sizes.values())[len(sizes) // 2]  # half the tensors are larger
    buckets = list(
        weight_buckets(policy.model, policy.rank, on=frozenset({0}), dtype=None, bucket_bytes=bound)
    )
    assert [n for b in buckets for n in b] == list(whole)  # every weight once, in order
    for bucket in buckets:
        nbytes = sum(sizes[n] for n in bucket)
        assert nbytes <= bound or len(bucket) == 1
    assert any(len(b) == 1 and sizes[next(iter(b))] > bound for b in buckets)
    tiny = list(
        weight_buckets(policy.model, policy.rank, on=frozenset({0}), dtype=None, bucket_bytes=1)
    )
    assert [len(b) for b in tiny] == [1] * len(whole)  # a bound below any tensor: one each


def test_a_bucketed_push_equals_a_whole_one(policy, model, tokenizer):
    """A run's push (``PolicyWorker.stage_weights`` with ``rollout.push_bucket_mb``), in
    buckets far smaller than the model, then the apply: the engine serves the policy."""
    engine = HFEngine(model, tokenizer, device="cpu")
    replicas = ReplicaSet([engine], [Slot(0, "", "driver")], ["engine"])
    policy.cfg = policy.cfg.model_copy(
        update={"rollout": policy.cfg.rollout.model_copy(update={"push_bucket_mb": 1})}
    )
    staged = policy.stage_weights(replicas.targets([0]), version=1)
    assert staged is not None and staged.moved_bytes == staged.weight_bytes
    assert engine.weight_version == 0
    replicas.apply_weights(1, staged=staged)
    assert replicas.weight_version == 1
    whole = policy.weights()
    assert whole is not None
    assert all(torch.equal(p, whole[n]) for n, p in _params(engine).items())


class Slow:
    """A staged engine whose generation takes ``delay`` seconds; records what ran when."""

    def __init__(self, delay: float) -> None:
        self.delay, self.events, self.version = delay, [], 0

    @property
    def weight_version(self) -> int:
        return self.version

    def generate(self, prompts, settings):
        self.events.append("generate")
        time.sleep(self.delay)
        self.events.append("generated")
        return [[Completion([1], [0.0], "stop")] * settings.group_size for _ in prompts]

    def stage_weights(self, named_tensors, *, version, last=True, lora_scaling=None):
        dict(named_tensors)
        if last:  # the push's whole (its buckets came before)
            self.events.append("stage")

    def apply_weights(self, version, *, nbytes=0):
        self.events.append("apply")
        self.version = version

    def update_weights(self, named_tensors, *, version):
        self.stage_weights(named_tensors, version=version)
        self.apply_weights(version)

    def released(self):
        return nullcontext()

    def close(self):
        pass


def test_a_stage_runs_beside_a_generation_and_the_apply_waits_for_it():
    engine = Slow(delay=0.5)
    replicas = ReplicaSet([engine], [Slot(0, "", "driver")], ["engine"])
    settings = SamplingSettings(group_size=2, max_tokens=1)
    thread = threading.Thread(target=replicas.generate, args=([[1, 2]], settings))
    thread.start()
    while "generate" not in engine.events:
        time.sleep(0.01)
    replicas.stage_weights([("w", torch.ones(1))], version=1)
    assert engine.events == ["generate", "stage"]  # staged while generating
    replicas.apply_weights(1)  # waits for the generation in flight
    thread.join()
    assert engine.events == ["generate", "stage", "generated", "apply"]
    assert replicas.weight_version == 1


class OneCall:
    """An engine with one-call pushes only (``update_weights``), as a third party's."""

    def __init__(self) -> None:
        self.version, self.got = 0, {}

    @property
    def weight_version(self) -> int:
        return self.version

    def generate(self, prompts, settings):
        return [[Completion([1], [0.0], "stop")] * settings.group_size for _ in prompts]

    def update_weights(self, named_tensors, *, version):
        self.got, self.version = dict(named_tensors), version

    def released(self):
        return nullcontext()

    def close(self):
        pass


def test_an_engine_with_one_call_pushes_is_staged_in_this_process():
    engine = OneCall()
    replicas = ReplicaSet([engine], [Slot(0, "", "driver")], ["engine"])
    assert stage(replicas.targets([0])[0], [{"w": torch.ones(2)}], version=3) == 8
    assert engine.version == 0 and engine.got == {}  # held until the apply
    replicas.apply_weights(3)
    assert engine.version == 3 and torch.equal(engine.got["w"], torch.ones(2))


# --- LoRA adapter pushes --------------------------------------------------------------


@pytest.fixture(scope="module")
def lora_policy(tiny_model_dir) -> PolicyWorker:
    cfg = load_config(
        "tiny-arith", [f"model.path={tiny_model_dir}", "train.device=cpu", "train.lora.rank=4"]
    )
    return PolicyWorker(Rank(0, 1, "cpu"), cfg=cfg, learning_steps=1)


def _train_adapters(policy: PolicyWorker, seed: int) -> None:
    """A new policy: every adapter moves (B starts at zero: the merge then matters)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if ".lora_" in name:
                p += 0.05 * torch.randn(p.shape, generator=gen)


def test_adapter_pushes_equal_merged_pushes_and_a_rebuilt_replica_gets_the_base(
    lora_policy, model, tokenizer
):
    """float32 engine: after a base push and after adapter-only pushes, the engine's
    weights equal those of a merged push, bit for bit; the later pushes move the adapters
    only; a replica set built again (as a restart builds it) gets the base again."""
    merged_engine = HFEngine(model, tokenizer, device="cpu")
    engine = HFEngine(model, tokenizer, device="cpu")
    replicas = ReplicaSet([engine], [Slot(0, "", "driver")], ["engine"])
    moved = []
    for version in (1, 2, 3):
        _train_adapters(lora_policy, seed=version)
        staged = lora_policy.stage_weights(
            replicas.targets([0]), version=version, lora_bases=frozenset(replicas.lora_bases)
        )
        assert staged is not None
        replicas.apply_weights(version, staged=staged)
        moved.append(staged.moved_bytes)
        merged = lora_policy.weights()
        assert merged is not None and not any(".lora_" in n for n in merged)
        merged_engine.update_weights(merged.items(), version=version)
        assert replicas.lora_bases == {0}
        same = _params(merged_engine)
        assert all(torch.equal(p, same[n]) for n, p in _params(engine).items())
    adapters = sum(p.numel() * 4 for n, p in lora_policy.model.named_parameters() if ".lora_" in n)
    assert moved[1] == moved[2] == adapters  # adapters only, float32
    assert moved[0] == staged.weight_bytes  # the base and the adapters
    rebuilt = ReplicaSet([HFEngine(model, tokenizer, device="cpu")], [Slot(0, "", "d")], ["r"])
    again = lora_policy.stage_weights(rebuilt.targets([0]), version=4, lora_bases=frozenset())
    assert again is not None and again.moved_bytes == moved[0] and again.lora_bases == {0}


def test_an_adapter_push_to_an_engine_without_a_base_fails_at_stage(lora_policy, model, tokenizer):
    engine = HFEngine(model, tokenizer, device="cpu")
    replicas = ReplicaSet([engine], [Slot(0, "", "driver")], ["engine"])
    with pytest.raises(ValueError, match="without the base weight"):
        lora_policy.stage_weights(replicas.targets([0]), version=1, lora_bases=frozenset({0}))
    with pytest.raises(RuntimeError, match="nothing staged"):
        engine.apply_weights(1)


def test_a_base_push_keeps_a_copy_of_the_base_not_the_trainers_tensors(lora_policy):
    from grouprl.engines.lora_push import AdapterMerge

    merge = AdapterMerge()
    w = torch.ones(2, 2)
    a, b = torch.ones(1, 2), torch.ones(2, 1)
    named = [("m.weight", w), ("m.lora_A.default.weight", a), ("m.lora_B.default.weight", b)]
    out = dict(merge.expand(named, scaling=0.5, version=1, last=True))
    assert torch.equal(out["m.weight"], torch.full((2, 2), 1.5))  # W + 0.5 * B @ A
    w.zero_()  # the trainer's tensor changes; the kept base does not
    out = dict(merge.expand(named[1:], scaling=0.5, version=2, last=True))
    assert torch.equal(out["m.weight"], torch.full((2, 2), 1.5))
    with pytest.raises(ValueError, match=r"no adapters for \['m'\]"):
        dict(merge.expand([], scaling=0.5, version=3, last=True))
