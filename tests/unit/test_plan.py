"""``render_plan``: every derived number appears with its arithmetic."""

from __future__ import annotations

from rich.console import Console

from grouprl.config import derive, load_config
from grouprl.config.plan import render_plan


def plan_text(recipe: str, overrides: list[str]) -> str:
    cfg = load_config(recipe, overrides)
    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(render_plan(cfg, derive(cfg)))
    return console.export_text()


def test_plan_shows_batch_arithmetic_for_tiny_arith():
    text = plan_text("tiny-arith", ["train.steps=60"])
    assert "16 prompts x 8 samples (rollout.n)" in text
    assert "128" in text
    assert "64 / 32 micro-batches per update" in text
    assert "1 pass (algo.num_iterations) x 128 / 64 mini-batches" in text
    assert "60 steps x 2" in text and "120" in text
    assert "128 prompt (data.max_prompt_tokens) + 64 completion" in text
    assert "24,576" in text  # 128 samples x 192 tokens
    assert "runs/tiny-arith" in text


def test_plan_follows_overrides():
    text = plan_text("tiny-arith", ["rollout.n=4", "algo.beta=0.05", "train.mini_batch_size=null"])
    assert "16 prompts x 4 samples" in text
    assert "algo.beta=0.05: k3 KL to a frozen copy" in text
    assert "train.mini_batch_size=null" in text


def test_plan_defers_steps_for_epochs_on_hub_data():
    text = plan_text("qwen2.5-0.5b-gsm8k", [])
    assert "computed after the dataset loads" in text
    assert "32 prompts x 8 samples" in text and "256" in text


def test_plan_converts_epochs_on_builtin_data():
    text = plan_text("tiny-arith", ["train.steps=null", "train.epochs=0.5"])
    assert "0.5 epochs x 20,000 rows / 16 prompts, rounded up" in text
    assert "625" in text
