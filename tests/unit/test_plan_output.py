"""``grouprl plan``'s output: every packaged recipe passes; a failing check comes after
the tables; 80 columns and pipes break no key name; ``--json`` for scripts."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from rich.console import Console
from typer.testing import CliRunner

from cli_probe import run_cli
from grouprl.cli import app
from grouprl.config import derive, load_config
from grouprl.config.errors import ConfigError
from grouprl.config.loader import list_recipes
from grouprl.plan.gpu_memory import plan_for_run
from grouprl.plan.render import plan_sections, render_plan

runner = CliRunner()
RECIPE_72B = "qwen2.5-72b-gspo-4x8"
# full fine-tuning without activation checkpointing: 153 GiB (FSDP2's bf16 layers; with
# checkpointing it fits, tests/unit/test_plan_fixes.py)
FULL_72B = ["train.lora.rank=0", "train.activation_checkpointing=false"]
KEY = re.compile(r"\b[a-z_]+(?:\.[a-z_0-9]+)+\b")  # train.micro_batch_size, plan/allocator.py


@pytest.fixture(autouse=True)
def no_hub_snapshots(monkeypatch, tmp_path):
    """Model sizes from grouprl's table of known configs, whatever this machine cached."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))


@pytest.mark.parametrize("recipe", [name for name, _ in list_recipes()])
def test_every_packaged_recipe_passes_plan(recipe):
    result = runner.invoke(app, ["plan", recipe])
    assert result.exit_code == 0, result.output
    assert "error" not in result.stderr


def test_a_failing_plan_prints_its_tables_then_the_failing_check():
    result = runner.invoke(app, ["plan", RECIPE_72B, *FULL_72B])
    assert result.exit_code == 2
    assert "MEMORY PER GPU" in result.stdout and "does not fit" in result.stdout
    assert "autocast copies" in result.stdout  # each term, as the error says
    assert result.stderr.startswith("error: estimated peak memory per GPU is 153 GiB")
    assert result.output.index("MEMORY PER GPU") < result.output.index("error:")


def test_a_config_that_fails_its_own_checks_prints_only_the_errors():
    result = runner.invoke(app, ["plan", "tiny-arith", "rollout.n=3"])
    assert result.exit_code == 2
    assert result.stdout == "" and "rollout.n=3" in result.stderr


def printed(recipe: str, overrides: list[str], *, width: int) -> str:
    cfg = load_config(recipe, overrides)
    console = Console(width=width, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(render_plan(cfg, derive(cfg)))
    return console.export_text()


@pytest.mark.parametrize("width", [80, 100, 120, 160])
@pytest.mark.parametrize("recipe", [RECIPE_72B, "tiny-arith-ppo", "tiny-search-mtgrpo"])
def test_plan_fits_the_width_and_breaks_no_key_name(recipe, width):
    text = printed(recipe, [], width=width)
    assert max(len(line) for line in text.splitlines()) <= width
    whole = printed(recipe, [], width=1000)
    assert set(KEY.findall(text)) == set(KEY.findall(whole))
    cfg = load_config(recipe, [])
    quantities = [q.strip() for _, rows in plan_sections(cfg, derive(cfg)) for q, _, _ in rows]
    assert [q for q in quantities if q not in text] == []  # each whole on its line


@pytest.mark.parametrize("columns", ["80", None])
@pytest.mark.procs
def test_piped_plan_fits_80_columns(columns):
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env |= {"COLUMNS": columns} if columns else {}
    result = subprocess.run(
        [sys.executable, "-m", "grouprl", "plan", RECIPE_72B],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert not [line for line in lines if line.endswith(" ")]
    assert set(KEY.findall(result.stdout)) == set(KEY.findall(printed(RECIPE_72B, [], width=1000)))
    assert "  samples per rank per mini-batch  8" in lines


def test_json_holds_the_derived_numbers_and_the_memory_estimate():
    result = runner.invoke(app, ["plan", RECIPE_72B, "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    cfg = load_config(RECIPE_72B, [])
    gpu = plan_for_run(cfg, derive(cfg))
    assert plan["recipe"] == RECIPE_72B and plan["ok"] is True and plan["problems"] == []
    assert plan["derived"]["world_size"] == 32 and plan["derived"]["samples_per_step"] == 512
    memory = plan["memory"]
    assert memory["checked"] is True and memory["fits"] is True and memory["gpu"] == "H100"
    assert memory["peak_bytes"] == gpu.peak and memory["reserved_bytes"] == gpu.reserved
    terms = {row["what"]: row["bytes"] for row in memory["training_gpu"]}
    assert terms["autocast copies"] == next(
        r.bytes for r in gpu.training_gpu if r.what == "autocast copies"
    )
    assert plan["target"]["device"] == "cuda"
    check = plan["sections"]["memory per GPU"][-1]
    assert check["quantity"] == "memory check" and check["value"] == "fits"


def test_json_of_a_failing_plan_lists_the_problem_and_exits_2():
    result = runner.invoke(app, ["plan", RECIPE_72B, *FULL_72B, "--json"])
    assert result.exit_code == 2
    plan = json.loads(result.stdout)
    assert plan["ok"] is False and plan["memory"]["fits"] is False
    [problem] = plan["problems"]
    assert problem.startswith("estimated peak memory per GPU is 153 GiB")
    assert plan["memory"]["peak_bytes"] > plan["memory"]["gpu_bytes"]


def test_json_of_a_config_that_does_not_load_is_still_one_object():
    result = runner.invoke(app, ["plan", "tiny-arith", "rollout.temprature=0.5", "--json"])
    assert result.exit_code == 2
    plan = json.loads(result.stdout)
    assert plan["ok"] is False and "rollout.temperature" in plan["problems"][0]


@pytest.mark.procs
def test_plan_json_and_a_failing_plan_import_no_heavy_modules():
    outcomes, heavy = run_cli(
        [
            ["grouprl", "plan", RECIPE_72B, "--json"],
            ["grouprl", "plan", RECIPE_72B, *FULL_72B],
        ]
    )
    assert [o.code for o in outcomes] == ["0", "2"]
    assert heavy == []


def async_section(recipe: str, overrides: list[str]) -> dict[str, tuple[str, str]]:
    """The async rows of ``grouprl plan``: quantity -> (value, how)."""
    cfg = load_config(recipe, overrides)
    sections = dict(plan_sections(cfg, derive(cfg)))
    return {quantity: (value, how) for quantity, value, how in sections["async"]}


def test_plan_says_a_synchronous_run_overlaps_nothing():
    rows = async_section("tiny-arith", [])
    assert rows["staleness bound"][0] == "0 (synchronous)"
    assert rows["correction"][0] == "none"  # auto with max_staleness=0 and no tis_cap
    assert rows["expected overlap"][0] == "none"
    assert "G + T + push" in rows["expected overlap"][1]
    assert rows["layout"][0] == "one process"  # the engine in the driver shares its cores
    assert "partial rollouts" not in rows


def test_plan_shows_the_cpu_actor_layout_the_bound_and_the_decoupled_default():
    rows = async_section("tiny-arith", ["rollout.max_staleness=2", "rollout.placement=actor"])
    assert rows["layout"][0] == "CPU actors"
    assert "other node(s) first" in rows["layout"][1]  # one rank trains in the driver
    assert rows["staleness bound"] == (
        "2 (wait)",
        "rollout.max_staleness=2: a sample trains at most 2 weight versions after the one "
        "that generated it; rollout.staleness_policy=wait: a prompt is admitted only while "
        "it cannot lag more; generation waits",
    )
    value, how = rows["correction"]
    assert value == "decoupled" and "cap 5.0 (its default; algo.tis_cap)" in how
    assert rows["expected overlap"][0] == "(G+T+push) / (max(G,T)+push)"
    assert rows["partial rollouts"][0] == "off"


def test_plan_shows_dedicated_gpus_drop_policy_partial_rollouts_and_tis():
    rows = async_section(
        "qwen2.5-7b-gsm8k-2x8",
        [
            "rollout.gpus=4",
            "rollout.max_staleness=4",
            "rollout.staleness_policy=drop",
            "rollout.partial_rollout_tokens=256",
            "algo.tis_cap=3",
        ],
    )
    assert rows["layout"][0] == "4 gen + 4 train"
    assert "per node x 2: 4 GPU(s) generate" in rows["layout"][1]
    assert rows["staleness bound"][0] == "4 (drop)" and "5 batches" in rows["staleness bound"][1]
    assert rows["partial rollouts"][0] == "256 tokens"
    value, how = rows["correction"]
    assert value == "tis" and "cap 3.0 (algo.tis_cap)" in how  # auto: tis_cap set
    assert rows["expected overlap"][0] == "(G+T+push) / (max(G,T)+push)"


def test_plan_refuses_staleness_where_the_engine_sleeps_on_the_training_gpus():
    """As `grouprl train` does (a one-GPU H200 run was refused there, not by plan, before)."""
    with pytest.raises(ConfigError, match=r"rollout.max_staleness=1 .* shares the training GPU"):
        async_section("qwen2.5-7b-gsm8k-2x8", ["rollout.max_staleness=1"])
    assert async_section("qwen2.5-7b-gsm8k-2x8", [])["layout"][0] == "shared GPUs"


def test_plan_warns_that_one_cpu_process_takes_turns():
    rows = async_section("tiny-arith", ["rollout.max_staleness=1"])
    assert rows["layout"][0] == "one process"
    assert rows["expected overlap"][0] == "little"
    assert "rollout.placement=actor" in rows["expected overlap"][1]


def test_plan_says_how_generated_programs_are_isolated_where_a_reward_runs_them():
    """issue 29: `grouprl plan` (and the run's start, rollout/side.log_containment) name
    the program sandbox's layers where `code_tests` scores; other runs say nothing of it."""
    result = runner.invoke(app, ["plan", "tiny-code"])  # arith rows have no tests to run
    assert result.exit_code == 0, result.output
    line = " ".join(result.output.split()).split("program sandbox (code_tests, docs/code.md): ")
    assert len(line) == 2 and "namespaces" in line[1] and "uid on the host" in line[1]
    assert "program sandbox" not in runner.invoke(app, ["plan", "tiny-arith"]).output
