"""The Python API without training: loading configs, registering rewards and
environments, the run directory a fresh run refuses, the MLflow sink's parts, lazy
imports."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

import grouprl
from grouprl.config.errors import ConfigError
from grouprl.config.observe import MlflowConfig
from grouprl.envs import registry as envs_registry
from grouprl.envs.factory import make_env
from grouprl.metrics.mlflow_sink import MlflowNotInstalledError, MlflowSink, flat_params
from grouprl.rewards import registry as rewards_registry
from grouprl.rewards.registry import RewardError
from grouprl.runtime import check_new_run

HEAVY = ("torch", "vllm", "ray", "transformers", "datasets")


@pytest.fixture
def registries():
    """Names registered by a test are gone after it."""
    registries = (rewards_registry.REWARD_FUNCTIONS, envs_registry.ENVIRONMENTS)
    before = [dict(registry) for registry in registries]
    yield
    for registry, names in zip(registries, before, strict=True):
        registry.clear()
        registry.update(names)


def test_a_recipe_name_a_path_and_a_mapping_load_alike(tmp_path):
    (tmp_path / "mine.yaml").write_text("extends: tiny-arith\nrollout: {n: 4}\n")
    mapping = {"extends": "tiny-arith", "rollout": {"n": 4}}
    by_name = grouprl.load_config("tiny-arith", ["rollout.n=4"])
    by_path = grouprl.load_config(tmp_path / "mine.yaml")
    by_map = grouprl.load_config(mapping, ["data.batch_size=16"])
    assert mapping == {"extends": "tiny-arith", "rollout": {"n": 4}}  # not changed in place
    assert (by_path.name, by_map.name) == ("mine", "run")
    same = {"name", "description"}
    assert by_map.model_dump(exclude=same) == by_name.model_dump(exclude=same)
    assert by_path.model_dump(exclude=same) == by_name.model_dump(exclude=same)


def test_load_config_errors_name_the_key_and_the_fix():
    with pytest.raises(ConfigError, match=r"rollout\.n = 0.*given as a mapping"):
        grouprl.load_config({"rollout": {"n": 0}}, check=False)
    with pytest.raises(ConfigError, match=r"one string; pass a list.*\['rollout.n=4'\]"):
        grouprl.load_config("tiny-arith", "rollout.n=4")
    with pytest.raises(ConfigError, match=r"rollout.n=3"):  # the batch arithmetic is checked
        grouprl.load_config("tiny-arith", ["rollout.n=3"])
    grouprl.load_config("tiny-arith", ["rollout.n=3"], check=False)
    with pytest.raises(ConfigError, match="apply to a recipe, not to a RunConfig"):
        grouprl.train(grouprl.load_config("tiny-arith"), ["rollout.n=4"])


def shout(completion, **_):
    """A module-level function: reward workers receive registered functions by reference."""
    return float(completion.isupper())


def test_a_registered_reward_is_found_by_name_and_each_name_is_taken_once(registries):
    assert grouprl.register_reward("shout")(shout) is shout  # as a decorator
    assert rewards_registry.resolve_reward("shout") is shout
    grouprl.load_config("tiny-arith", ["reward.functions=[{name: math_answer}, {name: shout}]"])
    with pytest.raises(RewardError, match=r"'shout' is already registered"):
        grouprl.register_reward("shout", shout)
    with pytest.raises(RewardError, match="import path"):
        grouprl.register_reward("rewards.py:shout", shout)
    with pytest.raises(RewardError, match="int is not a function"):
        grouprl.register_reward("three", 3)
    grouprl.register_reward("whisper", lambda completion, **_: 0.0)
    with pytest.raises(ConfigError, match="'whisper': the function registered under this name"):
        grouprl.load_config(  # a lambda cannot be sent to the reward worker processes
            "tiny-arith", ["reward.functions=[{name: math_answer}, {name: whisper}]"]
        )
    with pytest.raises(ConfigError, match="'whispr' is not a registered reward"):
        grouprl.load_config(
            "tiny-arith", ["reward.functions=[{name: math_answer}, {name: whispr}]"]
        )


def test_a_registered_environment_is_made_by_its_factory(registries, tmp_path):
    made = []

    @grouprl.register_env("echo")
    def echo(env_cfg, data_cfg, *, cache_dir):
        made.append((env_cfg.name, data_cfg.prompt_key, cache_dir))
        return "the environment"

    cfg = grouprl.load_config("tiny-arith", ["env.name=echo", "env.workers=0"])
    assert make_env(cfg.env, cfg.data, cache_dir=tmp_path) == "the environment"
    assert made == [("echo", "question", tmp_path)]
    # in worker processes (the default), a factory must reach them by reference
    with pytest.raises(ConfigError, match=r"env.name='echo'.*module-level function.*workers=0"):
        contained = cfg.env.sandbox.model_copy(update={"workers": 2})
        make_env(cfg.env.model_copy(update={"sandbox": contained}), cfg.data, cache_dir=tmp_path)
    with pytest.raises(
        ConfigError, match=r"env.name='ecko' is not an environment.*search_qa, echo"
    ):
        grouprl.load_config("tiny-arith", ["env.name=ecko"])
    with pytest.raises(ConfigError, match="'search_qa' is already registered"):
        grouprl.register_env("search_qa", echo)


def test_a_fresh_run_is_refused_where_another_run_is(tmp_path):
    run = tmp_path / "run"
    cfg = grouprl.load_config("tiny-arith", [f"trainer.run_dir={run}"])
    check_new_run(cfg)  # no directory yet
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text("name: x\n")
    check_new_run(cfg)  # what a start that failed before training leaves
    (run / "checkpoints" / "step_000002").mkdir()
    started = time.perf_counter()
    with pytest.raises(ConfigError) as err:
        grouprl.train(cfg)  # refused before anything loads
    assert time.perf_counter() - started < 2
    text = str(err.value)
    for part in (f"trainer.run_dir='{run}'", "checkpoints/step_000002", "trainer.resume=auto"):
        assert part in text
    assert f"delete {run}" in text
    for resume in ("auto", str(run / "checkpoints" / "step_000002")):
        check_new_run(
            grouprl.load_config(
                "tiny-arith", [f"trainer.run_dir={run}", f"trainer.resume={resume}"]
            )
        )


def test_a_memory_tier_holding_another_runs_checkpoints_is_refused(tmp_path):
    shm = tmp_path / "shm"
    (shm / "tiny-arith" / "step_000005").mkdir(parents=True)
    overrides = [f"trainer.run_dir={tmp_path / 'new'}", "checkpoint.memory.every=1"]
    cfg = grouprl.load_config("tiny-arith", [*overrides, f"checkpoint.memory.dir={shm}"])
    with pytest.raises(ConfigError, match=r"checkpoint.namespace='\{name\}' \(memory tier\)"):
        check_new_run(cfg)
    check_new_run(
        grouprl.load_config(
            "tiny-arith", [*overrides, "checkpoint.namespace=other", f"checkpoint.memory.dir={shm}"]
        )
    )


def test_mlflow_params_are_the_config_as_dotted_text():
    config = {"rollout": {"n": 8, "top_k": None}, "reward": {"functions": [{"name": "f"}]}}
    assert flat_params(config | {"trainer": {}}) == {
        "rollout.n": "8",
        "rollout.top_k": "null",
        "reward.functions": '[{"name": "f"}]',
        "trainer": "{}",
    }


def test_a_missing_mlflow_names_the_setting_and_the_install(monkeypatch, tmp_path):
    for name in ["mlflow", *(m for m in sys.modules if m.startswith("mlflow."))]:
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed (nor imported)
    fix = r"metrics.mlflow.enabled=true.*mlflow-skinny.*pip install 'grouprl\[mlflow\]'"
    with pytest.raises(MlflowNotInstalledError, match=fix):
        MlflowSink(MlflowConfig(enabled=True), run_dir=tmp_path, run_name="t", config_dict={})
    with pytest.raises(ConfigError, match=fix):  # checked with the config, before loading
        grouprl.load_config("tiny-arith", ["metrics.mlflow.enabled=true"])


@pytest.mark.procs
def test_import_grouprl_and_its_api_import_nothing_heavy():
    probe = (
        "import sys, grouprl\n"
        "assert callable(grouprl.load_config) and callable(grouprl.train)\n"
        f"print('HEAVY', sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "HEAVY []" in result.stdout
