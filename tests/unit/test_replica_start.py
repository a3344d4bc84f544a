"""A Ray-actor rollout replica's start limit (issue 37, item 18): a config key,
``rollout.start_timeout_s``, and a message that says what was waited for on this machine
(CPU or colocated: the engine loading; GPUs of its own: a node with them free), the key
and the fix."""

from __future__ import annotations

from grouprl.config.loader import load_config
from grouprl.config.replica_timeouts import START_S, start_bound


def test_on_cpu_the_start_is_the_engine_loading_with_ten_minutes_by_default():
    cfg = load_config("tiny-arith", [])
    assert cfg.rollout.start_timeout_s is None
    what, bound = start_bound(cfg.rollout.start_timeout_s, on_gpu=False, gpus_asked=0)
    assert bound.seconds == START_S["CPU"] == 600  # was a fixed 120 s, too short under load
    assert "loading the engine" in what and "CPUs" in what and "GPU" not in what
    assert "rollout.start_timeout_s=null: 600 s on CPU" in bound.rule
    assert "rollout.start_timeout_s=1200" in bound.rule  # the fix, with a value


def test_a_set_limit_is_used_and_named():
    cfg = load_config("tiny-arith", ["rollout.start_timeout_s=900"])
    _, bound = start_bound(cfg.rollout.start_timeout_s, on_gpu=False, gpus_asked=0)
    assert bound.seconds == 900 and bound.rule.startswith("rollout.start_timeout_s=900; raise")


def test_with_gpus_of_its_own_the_start_waits_for_them():
    what, bound = start_bound(None, on_gpu=True, gpus_asked=2)
    assert "a node with the 2 free GPU(s) it asks for" in what
    assert bound.seconds == START_S["GPU"]
    assert "lower rollout.gpus" in bound.rule and "rollout.start_timeout_s" in bound.rule
    colocated, _ = start_bound(None, on_gpu=True, gpus_asked=0)  # the ranks' GPUs: no wait
    assert "asks for" not in colocated and "loading the engine" in colocated
