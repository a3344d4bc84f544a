"""What a memory error offers (``plan/fixes.py``): only changes that fit, each re-planned
and applied here again, never a current value."""

from __future__ import annotations

import re

import pytest

from grouprl.config import ConfigError, derive, load_config
from grouprl.config.loader import list_recipes
from grouprl.plan.check import check_run
from grouprl.plan.fixes import levers, with_changes
from grouprl.plan.gpu_memory import plan_for_run
from grouprl.plan.memory import human_bytes

RECIPE_72B = "qwen2.5-72b-gspo-4x8"
FULL_72B = ["train.lora.rank=0"]  # the recipe's full fine-tuning (it trains LoRA)
OFFERED = re.compile(r"`([^`]+)` \(([\d.]+ [KMGT]?i?B)")


@pytest.fixture(autouse=True)
def no_hub_snapshots(monkeypatch, tmp_path):
    """Model sizes from grouprl's table of known configs, whatever this machine cached."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))


def memory_error(recipe: str, overrides: list[str]) -> str:
    with pytest.raises(ConfigError) as err:
        check_run(load_config(recipe, overrides))
    return str(err.value)


def offered(message: str) -> list[tuple[list[str], str]]:
    """(overrides, the peak the message states) of each change it offers."""
    return [(found.split(), peak) for found, peak in OFFERED.findall(message)]


def assert_each_offer_fits(recipe: str, overrides: list[str], message: str) -> None:
    for changes, peak in offered(message):
        cfg = load_config(recipe, [*overrides, *changes])
        derived = check_run(cfg)  # passes every check, memory included
        assert human_bytes(plan_for_run(cfg, derived).peak) == peak, changes


def test_full_72b_fits_and_without_checkpointing_is_offered_what_fits():
    """Under FSDP2's mixed precision the recipe's full fine-tuning plans as fitting (it
    needed 171 GiB with autocast's copies, issue 28). Without activation checkpointing it
    does not, and the error offers checkpointing, or the states over 32 nodes with the
    micro-batch their share allows; not the recipe's own 4 nodes."""
    cfg = load_config(RECIPE_72B, FULL_72B)
    plan = plan_for_run(cfg, check_run(cfg))
    assert plan.fits and plan.problems == []
    assert next(r.bytes for r in plan.training_gpu if r.what == "autocast copies") == 0
    overrides = [*FULL_72B, "train.activation_checkpointing=false"]
    message = memory_error(RECIPE_72B, overrides)
    assert "153 GiB" in message and "`grouprl plan` shows each term" in message
    assert offered(message) == [
        (["train.activation_checkpointing=true"], "77.1 GiB"),
        (["cluster.nodes=32", "train.micro_batch_size=1"], "68.9 GiB"),
    ]
    assert "cluster.nodes=4 " not in message  # the recipe's own value
    assert_each_offer_fits(RECIPE_72B, overrides, message)


def test_each_single_change_that_fits_with_its_mildest_value():
    """A 7B on 8 A100-40GBs with 640-token completions: several single changes fit; the
    micro-batch comes down only as far as it must (8 -> 2: 4 does not fit, 1 is not
    offered), and more nodes take a micro-batch that fits the rank's smaller share along."""
    overrides = [
        "model.path=Qwen/Qwen2.5-7B-Instruct",
        "cluster.gpus_per_node=8",
        "cluster.gpu=A100-40GB",
        "train.device=auto",
        "train.micro_batch_size=8",
        "rollout.max_tokens=640",
        "rollout.max_model_len=1280",
    ]
    message = memory_error("tiny-arith", overrides)
    assert "Each of these alone fits" in message
    changes = [" ".join(c) for c, _ in offered(message)]
    assert "train.micro_batch_size=2" in changes and "train.micro_batch_size=1" not in changes
    assert "cluster.nodes=2 train.micro_batch_size=4" in changes
    assert "train.activation_checkpointing=true" in changes
    assert "cluster.offload_optimizer=true" not in changes  # not enough alone
    assert_each_offer_fits("tiny-arith", overrides, message)


def test_without_a_single_fix_the_fewest_changes_that_fit_together():
    overrides = [*FULL_72B, "cluster.nodes=2", "train.activation_checkpointing=false"]
    message = memory_error(RECIPE_72B, overrides)
    assert "No single change fits; together these do" in message
    combined = [" ".join(c) for c, _ in offered(message)]
    assert combined[0] == "cluster.offload=true train.activation_checkpointing=true"
    assert all(len(c.split()) == 2 for c in combined)  # the fewest changes: two
    assert_each_offer_fits(RECIPE_72B, overrides, message)


def test_when_nothing_fits_the_error_names_the_nearest():
    small = [*FULL_72B, "cluster.offload=true", "cluster.gpu=12GiB"]
    message = memory_error(RECIPE_72B, small)
    assert "None of the simple changes fits cluster.gpu=12GiB, alone or up to 4 together" in message
    nearest = re.search(r"the nearest, `([^`]+)`, still needs ([\d.]+ GiB)", message)
    assert nearest is not None
    cfg = load_config(RECIPE_72B, [*small, *nearest[1].split()])
    assert human_bytes(plan_for_run(cfg, derive(cfg)).peak) == nearest[2]


@pytest.mark.parametrize("recipe", [name for name, _ in list_recipes()])
def test_no_lever_repeats_a_current_value(recipe):
    cfg = load_config(recipe, [])
    for lever in levers(cfg):
        for option in lever.options:
            for change in option:
                current = with_changes(cfg, [])
                for part in change.key.split("."):
                    current = getattr(current, part)
                assert current != change.value, (recipe, change.text)
