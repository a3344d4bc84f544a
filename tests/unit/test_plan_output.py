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
from grouprl.config.loader import list_recipes
from grouprl.plan.gpu_memory import plan_for_run
from grouprl.plan.render import plan_sections, render_plan

runner = CliRunner()
RECIPE_72B = "qwen2.5-72b-gspo-4x8"
FULL_72B = ["train.lora.rank=0", "cluster.offload=true"]  # full fine-tuning: 171 GiB
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
    assert result.stderr.startswith("error: estimated peak memory per GPU is 171 GiB")
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
    assert problem.startswith("estimated peak memory per GPU is 171 GiB")
    assert plan["memory"]["peak_bytes"] > plan["memory"]["gpu_bytes"]


def test_json_of_a_config_that_does_not_load_is_still_one_object():
    result = runner.invoke(app, ["plan", "tiny-arith", "rollout.temprature=0.5", "--json"])
    assert result.exit_code == 2
    plan = json.loads(result.stdout)
    assert plan["ok"] is False and "rollout.temperature" in plan["problems"][0]


def test_plan_json_and_a_failing_plan_import_no_heavy_modules():
    outcomes, heavy = run_cli(
        [
            ["grouprl", "plan", RECIPE_72B, "--json"],
            ["grouprl", "plan", RECIPE_72B, *FULL_72B],
        ]
    )
    assert [o.code for o in outcomes] == ["0", "2"]
    assert heavy == []
