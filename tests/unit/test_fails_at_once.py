"""Mistakes that fail at once, before anything heavy loads, naming the key, the value
and the fix: a mistyped local path (never a hub lookup), a reward the training script
registered from Python when `grouprl eval` scores its run, and `cluster.nodes` > 1 on the
one-node Ray grouprl starts itself."""

from __future__ import annotations

import pytest

from cli_probe import run_cli
from grouprl.assets import model_path_problem, path_reason
from grouprl.cluster.connection import ClusterError, check_local_ray
from grouprl.config.loader import load_config
from grouprl.config.redact import save_resolved
from grouprl.config.train import ClusterConfig


@pytest.fixture
def here(tmp_path, monkeypatch):
    """A working directory holding runs/myrun (a run) and models/tiny (a model)."""
    (tmp_path / "runs" / "myrun" / "checkpoints").mkdir(parents=True)
    (tmp_path / "models" / "tiny").mkdir(parents=True)
    (tmp_path / "models" / "tiny" / "config.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    "value",
    ["Qwen/Qwen2.5-0.5B-Instruct", "gpt2", "meta-llama/Llama-3.1-8B", "builtin:tiny-arith"],
)
def test_hub_names_stay_hub_names(here, value):
    assert path_reason(value) is None and model_path_problem(value) is None


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("./no-such-model", "it starts with ./"),
        ("../up", "it starts with ../"),
        ("/abs/model", "it starts with /"),
        ("~/model", "it starts with ~"),
        ("runs/myrn", "runs/ is a directory here"),  # ORG/NAME in form, but runs/ is here
        ("a/b/c", "at most one '/'"),
        ("my model", "not a valid hub name"),
    ],
)
def test_values_that_look_like_paths_are_read_as_paths(here, value, why):
    assert why in path_reason(value)
    problem = model_path_problem(value)
    assert problem.startswith(f"model.path={value!r} not found") and "Fix:" in problem


def test_a_path_is_checked_as_a_model_directory(here):
    assert model_path_problem("models/tiny") is None
    assert "Did you mean 'models/tiny'?" in model_path_problem("models/tin")
    run = model_path_problem("runs/myrun")
    assert "grouprl run directory" in run and "grouprl export runs/myrun" in run


@pytest.mark.procs
def test_mistyped_paths_fail_before_anything_loads(here):
    (outcomes, heavy) = run_cli(
        [
            ["grouprl", "plan", "tiny-arith", "model.path=./no-such-model"],
            ["grouprl", "eval", "runs/myrn"],
            ["grouprl", "export", "runs/myrn", "out"],
            ["grouprl", "ckpt", "ls", "/nope"],
            ["grouprl", "plan", "tiny-arith", "model.path=./models/tiny"],
        ]
    )
    plan, eval_, export, ls, good = outcomes
    assert plan.code == "2" and "model.path='./no-such-model' not found" in plan.stderr
    for outcome in (eval_, export):
        assert outcome.code == "2", outcome
        assert "TARGET='runs/myrn' not found" in outcome.stderr
        assert "Did you mean 'runs/myrun'?" in outcome.stderr
    assert "never looked up on the hub" in eval_.stderr
    assert ls.code == "2" and "TARGET='/nope' not found" in ls.stderr
    assert good.code == "0", good.stderr
    # no torch, transformers (so no hub lookup) or ray: nothing heavy was needed
    assert heavy == []


@pytest.mark.procs
def test_eval_of_a_run_with_a_python_registered_reward_says_how_to_score_it(here):
    cfg = load_config("tiny-arith", ["reward.functions=[{name: short}]"])
    save_resolved(cfg, here / "runs" / "myrun" / "config.yaml")
    [outcome], heavy = run_cli([["grouprl", "eval", "runs/myrun"]])
    assert outcome.code == "2", outcome
    text = " ".join(outcome.stderr.split())
    assert "reward.functions.0.name='short'" in text and "registered from Python" in text
    assert "reward.functions.0.name=train_script.py:FUNCTION" in text  # the import-path form
    assert "grouprl.evaluate('runs/myrun')" in text  # or from Python, after registering it
    assert "Did you mean" not in text
    assert heavy == []


@pytest.mark.procs
def test_several_nodes_on_the_local_ray_fail_at_once_with_the_fix(here, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(ClusterError, match=r"cluster.nodes=1 cluster.workers_per_node=2"):
        check_local_ray(ClusterConfig(nodes=2), world_size=2)
    check_local_ray(ClusterConfig(nodes=1, workers_per_node=2), world_size=2)
    check_local_ray(ClusterConfig(nodes=2, address="10.0.0.1:6379"), world_size=2)
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")  # inside a `grouprl submit` job
    check_local_ray(ClusterConfig(nodes=2), world_size=2)
    monkeypatch.delenv("RAY_ADDRESS")
    argv = ["grouprl", "train", "tiny-arith", "cluster.nodes=2", "rollout.engine=hf"]
    [outcome], heavy = run_cli([[*argv, f"trainer.run_dir={here}/runs/two"]])
    assert outcome.code == "2" and "cluster.workers_per_node=2" in outcome.stderr
    assert heavy == []  # no Ray started, nothing waited for
