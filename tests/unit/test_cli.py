"""The ``grouprl`` command line: exit codes, messages, speed and lazy imports."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli_probe import HEAVY, run_cli
from grouprl.cli import app

SCRIPT = Path(sys.executable).parent / "grouprl"
runner = CliRunner()


def grouprl(*args: str) -> subprocess.CompletedProcess:
    command = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "grouprl"]
    return subprocess.run(
        [*command, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )


def test_recipes_lists_tiny_arith_with_description():
    result = runner.invoke(app, ["recipes"])
    assert result.exit_code == 0
    line = next(ln for ln in result.output.splitlines() if ln.startswith("tiny-arith"))
    assert "GRPO on built-in arithmetic word problems" in line


@pytest.mark.procs
def test_plan_tiny_arith_exits_0_and_shows_samples_per_step():
    result = runner.invoke(app, ["plan", "tiny-arith"])
    assert result.exit_code == 0, result.output
    assert "128" in result.output
    assert "samples per step" in result.output


def test_user_error_exits_2_in_red_without_traceback():
    result = runner.invoke(app, ["plan", "tiny-arith", "rollout.temprature=0.5"])
    assert result.exit_code == 2
    assert "Did you mean rollout.temperature" in result.output
    assert "Traceback" not in result.output


def test_any_exception_marked_user_error_is_reported_like_config_error(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # runs/tiny-arith here may hold a run, which train refuses

    class DatasetMissing(RuntimeError):
        user_error = True

    def fail(cfg):
        raise DatasetMissing("data.train.source='x.jsonl' does not exist")

    module = types.ModuleType("grouprl.driver.run")
    module.train = fail
    monkeypatch.setitem(sys.modules, "grouprl.driver.run", module)
    result = runner.invoke(app, ["train", "tiny-arith"])
    assert result.exit_code == 2
    assert "x.jsonl' does not exist" in result.output


@pytest.mark.procs
def test_bad_batch_arithmetic_fails_before_any_model_loads():
    # `grouprl train tiny-arith rollout.n=3` exits 2 with the keys and no traceback, and it
    # gets there without importing torch, transformers or vllm: nothing heavy loads first
    # (which is what keeps it well under 2 s; the time itself is not asserted here).
    result = grouprl("train", "tiny-arith", "rollout.n=3")
    assert result.returncode == 2, result.stderr
    output = result.stdout + result.stderr
    assert "Traceback" not in output
    for key in ("data.batch_size=16", "rollout.n=3", "train.mini_batch_size=64"):
        assert key in result.stderr
    [outcome], heavy = run_cli([["grouprl", "train", "tiny-arith", "rollout.n=3"]])
    assert outcome.code == "2" and heavy == [], outcome


@pytest.mark.procs
def test_plan_and_help_import_no_heavy_modules():
    probe = (
        "import sys\n"
        "from grouprl.cli import main\n"
        "for argv in (['grouprl', '--help'], ['grouprl', 'plan', 'tiny-arith']):\n"
        "    sys.argv = argv\n"
        "    try:\n"
        "        main()\n"
        "    except SystemExit as exit:\n"
        "        assert exit.code in (0, None), exit.code\n"
        f"print('HEAVY', sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "HEAVY []" in result.stdout
    assert "samples per step" in result.stdout


@pytest.mark.procs
def test_python_dash_m_runs_the_cli():
    result = subprocess.run(
        [sys.executable, "-m", "grouprl", "recipes"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "tiny-arith" in result.stdout


def test_a_restart_prints_a_failure_whose_text_looks_like_markup(monkeypatch, capsys):
    """Gloo's errors carry source paths in brackets ("[/__w/.../pair.cc:537]"); the
    restart line prints them as text instead of failing the run on a markup error."""
    from grouprl.cluster.connection import WorkerFailed
    from grouprl.config.loader import load_config
    from grouprl.driver import run

    failure = "rank 1 died: [/__w/pytorch/third_party/gloo/transport/tcp/pair.cc:537] reset"
    sessions = []

    def session(cfg):
        sessions.append(cfg.trainer.resume)
        if len(sessions) == 1:
            raise WorkerFailed(failure)
        return {"steps": 1}

    monkeypatch.setattr(run, "_train_session", session)
    cfg = load_config("tiny-arith", ["trainer.max_restarts=1"])
    assert run.train(cfg) == {"steps": 1}
    assert sessions[1] == "auto"
    err = " ".join(capsys.readouterr().err.split())
    assert "pair.cc:537] reset" in err and "restart 1 of trainer.max_restarts=1" in err


@pytest.mark.procs
def test_bad_reward_name_data_file_or_column_fail_in_plan_and_train_before_any_model_loads(
    tmp_path,
):
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"problem": "1+1?", "solution": "2"}\n')
    missing = tmp_path / "nope.parquet"
    cases = [
        (["reward.functions=[{name: math_anwser}]"], "reward.functions.0.name='math_anwser'"),
        ([f"data.train.source={missing}"], f"data.train.source='{missing}': file not found"),
        (
            [f"data.train.source={rows}", "data.prompt_key=problem"],
            f"data.answer_key='answer' is not a column of data.train.source='{rows}'",
        ),
    ]
    argvs = [
        ["grouprl", command, "tiny-arith", "data.eval=null", *overrides]
        for command in ("plan", "train")
        for overrides, _ in cases
    ]
    outcomes, heavy = run_cli(argvs)
    assert heavy == []
    for outcome, (_, message) in zip(outcomes, cases * 2, strict=True):
        assert message in outcome.stderr and outcome.code == "2", outcome
        assert "Traceback" not in outcome.stderr
    assert "Did you mean 'math_answer'?" in outcomes[0].stderr


def test_version_is_the_installed_package_version():
    from importlib.metadata import version

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output == f"grouprl {version('grouprl')}\n"


def test_init_writes_a_commented_recipe_that_plans_and_never_overwrites(tmp_path):
    import yaml

    target = tmp_path / "my-run"
    result = runner.invoke(app, ["init", str(target)])
    assert result.exit_code == 0, result.output
    path = tmp_path / "my-run.yaml"
    text = path.read_text()
    recipe = yaml.safe_load(text)
    assert recipe["name"] == "my-run"
    sections = {"model", "data", "reward", "rollout", "algo", "train", "trainer", "checkpoint"}
    assert sections <= set(recipe)
    uncommented = [
        line
        for line in text.splitlines()
        if line.strip() and not line.endswith(":") and "#" not in line
    ]
    assert uncommented == []  # every key says what it does
    planned = runner.invoke(app, ["plan", str(path)])
    assert planned.exit_code == 0, planned.output
    again = runner.invoke(app, ["init", str(target)])
    assert again.exit_code == 2 and "already exists" in again.output
    assert path.read_text() == text
