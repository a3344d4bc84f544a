"""The example environments (examples/envs/) train by file path, as a new user's would:
each runs in the environment's worker processes, 2 steps on the tiny model (hf engine)."""

import json
from pathlib import Path

import pytest

from grouprl.config.loader import load_config
from grouprl.driver.run import train

EXAMPLES = Path(__file__).resolve().parents[2] / "examples/envs"


def _run(tmp_path, tiny_model_dir, name: str, *extra: str) -> list[dict]:
    cfg = load_config(
        "tiny-arith",
        [
            f"model.path={tiny_model_dir}",
            f"env.name={EXAMPLES / name}",
            "rollout.engine=hf",
            "rollout.n=4",
            "rollout.max_tokens=40",
            "rollout.max_model_len=512",
            "data.batch_size=2",
            "data.train.limit=16",
            "data.eval.limit=4",
            "train.mini_batch_size=8",
            "train.micro_batch_size=8",
            "train.steps=2",
            "trainer.eval_every=null",
            "metrics.progress=false",
            f"trainer.run_dir={tmp_path / 'run'}",
            *extra,
        ],
    )
    summary = train(cfg)
    assert summary["finished"] and summary["step"] == 2
    return [json.loads(x) for x in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]


def test_guess_the_number_gives_feedback_and_another_turn(tmp_path, tiny_model_dir):
    lines = _run(tmp_path, tiny_model_dir, "guess_number.py:GuessTheNumber", "env.max_turns=3")
    steps = [x for x in lines if "episode/turns" in x]
    assert len(steps) == 2
    # wrong guesses get feedback and another turn: some episode runs past its first turn
    assert max(x["episode/turns"] for x in steps) > 1.0
    for x in steps:
        stops = {k: v for k, v in x.items() if k.startswith("episode/stop/")}
        assert sum(stops.values()) == pytest.approx(1.0)
        assert x["episode/env_errors"] == 0.0
        assert x["episode/stop/parse_error"] == 0.0


def test_calculator_runs_tool_calls_and_passes_env_args(tmp_path, tiny_model_dir):
    lines = _run(
        tmp_path,
        tiny_model_dir,
        "calculator.py:Calculator",
        "env.args={max_value: 1000, timeout_s: 2.0}",
        "env.max_turns=2",
        "data.max_prompt_tokens=256",
    )
    steps = [x for x in lines if "episode/turns" in x]
    assert len(steps) == 2 and all(x["episode/env_errors"] == 0.0 for x in steps)
    assert any("eval/episode/turns" in x for x in lines)
