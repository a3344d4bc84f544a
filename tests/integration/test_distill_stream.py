"""On-policy distillation with the rollout stream (rollout.max_staleness=1) on the tiny
model and the transformers engines, on the teacher's top 4 (algo.teacher_top_k): the
teacher scores each group before it reaches the buffer, every step logs the reverse KL,
the forward KL the loss trains on and the teacher's seconds, the groups a checkpoint
holds keep their teacher logprobs and top k, and a run stopped and resumed trains from
them."""

import functools
import json
import time

from grouprl.config.loader import load_config
from grouprl.driver.run import train
from grouprl.workers.policy import PolicyWorker

TEACHER = "builtin:tiny-arith-teacher"


def _cfg(run_dir, *extra):
    return load_config(
        "tiny-arith-distill",
        [
            "model.path=builtin:tiny-arith",
            f"teacher.path={TEACHER}",
            "rollout.engine=hf",
            "teacher.engine=hf",
            "rollout.n=2",
            "rollout.max_tokens=8",
            "rollout.max_staleness=1",
            "algo.teacher_top_k=4",
            "data.batch_size=2",
            "data.train.limit=32",
            "data.eval=null",
            "train.mini_batch_size=4",
            "train.micro_batch_size=4",
            "train.steps=4",
            "trainer.eval_every=null",
            "metrics.progress=false",
            f"trainer.run_dir={run_dir}",
            *extra,
        ],
    )


def _steps(run_dir):
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {x["step"]: x for x in lines if "distill/reverse_kl" in x}


def test_a_streamed_distillation_saves_and_resumes_the_teacher_logprobs(tmp_path, monkeypatch):
    update = PolicyWorker.update

    @functools.wraps(update)
    def slow_update(self, *args, **kwargs):
        """1 s longer: the producer finishes step 3's round (4 short samples) meanwhile,
        however loaded the machine, so the checkpoint's buffer holds it."""
        time.sleep(1.0)
        return update(self, *args, **kwargs)

    monkeypatch.setattr(PolicyWorker, "update", slow_update)
    run_dir = tmp_path / "run"
    stopped = train(_cfg(run_dir, "trainer.stop_after=2"))
    assert stopped["step"] == 2 and not stopped["finished"]
    trainer = json.loads(next(run_dir.rglob("trainer.json")).read_text())
    held = [t for group in trainer["stream"]["buffer"] for t in group["trajectories"]]
    assert held, "the stream drew step 3's groups ahead, and the checkpoint holds them"
    for t in held:  # scored by the teacher before they reached the buffer
        generated = sum(len(turn["completion"]["token_ids"]) for turn in t["turns"])
        assert len(t["teacher_logprobs"]) == generated
        assert all(isinstance(v, float) and v <= 0 for v in t["teacher_logprobs"])
        assert [len(ids) for ids in t["teacher_top_ids"]] == [4] * generated
        assert [len(lps) for lps in t["teacher_top_logprobs"]] == [4] * generated
    resumed = train(_cfg(run_dir, "trainer.resume=auto"))
    assert resumed["finished"]
    steps = _steps(run_dir)
    assert sorted(steps) == [1, 2, 3, 4]  # every step, before and after the resume
    for x in steps.values():
        assert x["train/dropped_samples"] == 0 and x["failures/reward"] == 0
        assert abs(x["distill/reverse_kl"]) < 20
        assert abs(x["distill/forward_kl"]) < 20  # the top k truncated: it may dip below 0
    # the teacher's seconds come with the rounds that finished before each step
    assert any(x.get("distill/teacher_seconds", 0) > 0 for x in steps.values())
    for x in steps.values():  # asked on the thread that scores the groups as they finish
        hidden = x.get("distill/teacher_hidden_s", 0.0)
        assert 0 <= hidden <= x.get("distill/teacher_seconds", 0.0) + 1e-9
