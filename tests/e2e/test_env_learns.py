"""A user's environment, named by file path, learns: GRPO raises the held-out win rate
of the guess-the-number example (examples/envs/guess_number.py) on the shipped tiny
model. Long (`make test-long` only): `make test` trains each example 2 steps
(tests/integration/test_env_examples.py)."""

from pathlib import Path

import pytest

from grouprl.config.loader import load_config
from grouprl.driver.run import train
from long import LONG

MARGIN = 0.10
GAME = Path(__file__).resolve().parents[2] / "examples/envs/guess_number.py"


@pytest.mark.slow
@pytest.mark.skipif(not LONG, reason="a learning run: make test-long (GROUPRL_TEST_LONG=1)")
def test_guess_the_number_wins_more_held_out_games(tmp_path):
    cfg = load_config(
        "tiny-arith",
        [
            f"env.name={GAME}:GuessTheNumber",
            "env.max_turns=3",
            "rollout.max_model_len=384",
            "train.steps=8",
            "trainer.eval_every=null",
            "data.eval.limit=100",
            "metrics.progress=false",
            f"trainer.run_dir={tmp_path / 'run'}",
        ],
    )
    summary = train(cfg)
    before, after = summary["held_out_accuracy_before"], summary["held_out_accuracy_after"]
    assert after >= before + MARGIN, f"held-out games won {before:.2f} -> {after:.2f}"
