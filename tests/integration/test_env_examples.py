"""The example environments (examples/envs/) train by file path, as a new user's would:
each runs in the environment's worker processes, 2 steps on the tiny model (hf engine)."""

import json
from pathlib import Path

import pytest

from grouprl.config.loader import load_config
from grouprl.driver.run import train

EXAMPLES = Path(__file__).resolve().parents[2] / "examples/envs"


def _run(tmp_path, tiny_model_dir, name: str, *extra: str, steps: int = 2) -> list[dict]:
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
            f"train.steps={steps}",
            "trainer.eval_every=null",
            "metrics.progress=false",
            f"trainer.run_dir={tmp_path / 'run'}",
            *extra,
        ],
    )
    summary = train(cfg)
    assert summary["finished"] and summary["step"] == steps
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


def test_a_multi_turn_environment_streams_with_partial_rollouts(tmp_path, tiny_model_dir):
    """rollout.max_staleness=2 with partial rollouts of 8 tokens over an environment in
    its worker processes: episodes of several turns generate on the stream's thread while
    the policy trains, every step within the staleness bound, each token's version seen
    by the loss (its lag's statistics), and nothing fails."""
    lines = _run(
        tmp_path,
        tiny_model_dir,
        "guess_number.py:GuessTheNumber",
        "env.max_turns=3",
        "rollout.max_staleness=2",
        "rollout.partial_rollout_tokens=8",
        steps=4,
    )
    steps = [x for x in lines if "staleness" in x]
    assert len(steps) == 4 and max(x["staleness"] for x in steps) <= 2.0
    assert all(x["train/dropped_samples"] == 0.0 for x in steps)
    assert any(x.get("episode/turns", 0.0) > 1.0 for x in steps)
    for x in steps:  # the loss grouped its tokens by the version that sampled them
        lags = [int(k.split("/")[1].removeprefix("lag")) for k in x if k.endswith("/kl")]
        assert lags and max(lags) <= 2, x


SCRIPTED_CALCULATOR = """
import importlib.util

spec = importlib.util.spec_from_file_location("calculator_example", {path!r})
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)

CALLS = "<multiply><a>12</a><b>12</b></multiply> <add><a>2</a><b>3</b></add>"


class ScriptedCalculator(example.Calculator):
    def episode(self, row):
        return ScriptedEpisode(self, row)


class ScriptedEpisode(example.CalculatorEpisode):
    def step(self, model_text):
        first, self.stepped = not getattr(self, "stepped", False), True
        return super().step(CALLS if first else model_text)
"""


def test_calculator_runs_tool_calls_and_passes_env_args(tmp_path, tiny_model_dir):
    """The example's Calculator, built from env.args in its workers, with each episode's
    first turn read as two tool calls (the tiny arithmetic model writes none of its own):
    12 x 12 is past env.args.max_value=100 and comes back as an error, 2 + 3 does not.
    With the default max_value (1e6) neither would fail. One turn: the calls run, and the
    episode ends at env.max_turns (the runtime of the unscripted example's run)."""
    scripted = tmp_path / "scripted_calculator.py"
    scripted.write_text(SCRIPTED_CALCULATOR.format(path=str(EXAMPLES / "calculator.py")))
    lines = _run(
        tmp_path,
        tiny_model_dir,
        f"{scripted}:ScriptedCalculator",
        "env.args={max_value: 100, timeout_s: 2.0}",
        "env.max_turns=1",
        "data.max_prompt_tokens=256",
    )
    steps = [x for x in lines if "episode/turns" in x]
    assert len(steps) == 2 and all(x["episode/env_errors"] == 0.0 for x in steps)
    for x in steps:  # every episode made both calls; max_value=100 refused 12 x 12 only
        assert x["episode/tool_calls"] == 2.0 and x["episode/tool_error_rate"] == 0.5, x
        assert x["episode/stop/max_turns"] == 1.0, x
    assert any("eval/episode/turns" in x for x in lines)
