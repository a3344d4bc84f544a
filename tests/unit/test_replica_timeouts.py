"""``config/replica_timeouts.py``: how long a rollout replica's call may run (the Ray test
in tests/integration/test_ray_replica_hang.py stops a replica and sees the bound end it)."""

from __future__ import annotations

import pytest
from test_plan import TWO_BY_EIGHT, plan_text, row

from grouprl.config import load_config
from grouprl.config.replica_timeouts import (
    FLOOR_S,
    generation_bound,
    other_call_bound,
    push_bound,
    step_generation_bound,
)


def test_an_explicit_timeout_bounds_every_call():
    gen = generation_bound(
        7.0, prefill_tokens=10**9, sequences=10**6, new_tokens=10**9, on_gpu=False
    )
    assert (gen.seconds, gen.rule) == (7.0, "rollout.timeout_s=7; raise it if the replica is slow")
    assert push_bound(7.0, nbytes=10**12).seconds == 7.0
    assert other_call_bound(7.0).seconds == 7.0


def test_the_default_is_three_times_the_work_at_conservative_rates_with_a_floor():
    small = generation_bound(None, prefill_tokens=40, sequences=4, new_tokens=64, on_gpu=False)
    assert small.seconds == FLOOR_S == 120
    # 64 sequences: 32,768 prompt tokens at 500/s and 65,536 new ones at 20/s on CPU
    cpu = generation_bound(
        None, prefill_tokens=32_768, sequences=64, new_tokens=65_536, on_gpu=False
    )
    assert cpu.seconds == pytest.approx(3 * (32_768 / 500 + 65_536 / 20))
    assert "rollout.timeout_s=null" in cpu.rule and "set rollout.timeout_s" in cpu.rule
    # the same call on GPU: 10,000 and 500 tokens/s
    gpu = generation_bound(
        None, prefill_tokens=32_768, sequences=64, new_tokens=65_536, on_gpu=True
    )
    assert gpu.seconds == pytest.approx(3 * (32_768 / 10_000 + 65_536 / 500))
    # a weight push: 3x its bytes at 100 MB/s (7B parameters in bf16: 420 s)
    assert push_bound(None, nbytes=14 * 10**9).seconds == pytest.approx(420)
    assert push_bound(None, nbytes=5 * 10**6).seconds == FLOOR_S


def test_a_steps_bound_is_a_replicas_share_of_the_prompts():
    cfg = load_config(
        "tiny-arith", [*TWO_BY_EIGHT, "rollout.max_tokens=512", "data.max_prompt_tokens=512"]
    )
    # 128 prompts over 16 replicas: 8 prompts x 8 samples of 512 prompt + 512 new tokens
    expected = 3 * (64 * 512 / 10_000 + 64 * 512 / 500)
    assert step_generation_bound(cfg, on_gpu=True).seconds == pytest.approx(expected)


def test_plan_shows_the_replica_call_limit():
    value, how = row(plan_text("tiny-arith", TWO_BY_EIGHT), "replica call limit")
    assert value == "120 s" and "rollout.timeout_s=null" in how
    assert row(
        plan_text("tiny-arith", [*TWO_BY_EIGHT, "rollout.timeout_s=90"]), "replica call limit"
    ) == (
        "90 s",
        "a step's generation: rollout.timeout_s=90; raise it if the replica is slow",
    )
