"""Runs that would train on zeros stop instead, with the fix: a script that trains
without ``if __name__ == "__main__":`` (its reward workers re-run it: each would start a
run of its own, and every reward would fail). Tiny model, transformers engine, one step.
A reward function that fails on every call stops the run at the failure brake
(tests/integration/test_stops_without_progress.py: one that goes down mid-run)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

FIX = 'put the training call under `if __name__ == "__main__":`'


def _overrides(run_dir, tiny_model_dir, reward="math_answer"):
    return [
        f"model.path={tiny_model_dir}",
        "rollout.engine=hf",
        "rollout.n=2",
        "rollout.max_tokens=8",
        "data.batch_size=2",
        "data.train.limit=8",
        "data.eval=null",
        "train.mini_batch_size=4",
        "train.micro_batch_size=4",
        "train.steps=1",
        "metrics.progress=false",
        "metrics.report=false",  # a subprocess: conftest's default does not reach it
        f"reward.functions=[{{name: math_answer}}, {{name: {reward}, weight: 0.1}}]",
        f"trainer.run_dir={run_dir}",
    ]


SCRIPT = textwrap.dedent(
    """
    import grouprl

    @grouprl.register_reward("ends_with_answer")
    def ends_with_answer(completion: str, *, reference: str, **kwargs) -> float:
        return float(completion.strip().endswith(reference.split("####")[-1].strip()))

    cfg = grouprl.load_config("tiny-arith", {overrides!r})
    {call}
    """
)


def _script(tmp_path, tiny_model_dir, call: str) -> subprocess.CompletedProcess:
    overrides = _overrides(tmp_path / "run", tiny_model_dir, reward="ends_with_answer")
    (tmp_path / "script.py").write_text(SCRIPT.format(overrides=overrides, call=call))
    return subprocess.run(
        [sys.executable, "script.py"], cwd=tmp_path, capture_output=True, text=True, timeout=90
    )


def _trained_steps(run_dir) -> list[int]:
    metrics = run_dir / "metrics.jsonl"
    if not metrics.is_file():
        return []
    lines = [json.loads(x) for x in metrics.read_text().splitlines()]
    return [x["step"] for x in lines if "reward/mean" in x]


def test_a_script_without_the_main_guard_is_refused_before_anything_loads(tmp_path, tiny_model_dir):
    t0 = time.monotonic()
    done = _script(tmp_path, tiny_model_dir, call="grouprl.train(cfg)")
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert "UnguardedMainError" in last and FIX in last
    assert f"{tmp_path / 'script.py'}:" in last and "calls grouprl.train" in last
    assert not (tmp_path / "run").exists()  # no run started, in this process or a worker
    assert "validating" not in done.stdout
    assert time.monotonic() - t0 < 30  # seconds, not a run per worker


def test_a_guard_the_workers_pass_stops_the_run_at_its_first_scoring(tmp_path, tiny_model_dir):
    """`__name__ in (...)` gets past the parent's reading of the script; the reward workers
    that re-run it then refuse to train, and their pool stops the run with the fix."""
    call = 'if __name__ in ("__main__", "__mp_main__"):\n    grouprl.train(cfg)'
    done = _script(tmp_path, tiny_model_dir, call=call)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert "UnguardedMainError" in last and FIX in last
    assert f"a reward worker process re-imported the script {tmp_path / 'script.py'}" in last
    assert done.stdout.count("validating") <= 1  # the parent's run only
    assert _trained_steps(tmp_path / "run") == []  # stopped before training on zeros
