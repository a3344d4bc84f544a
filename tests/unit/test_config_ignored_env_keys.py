"""Settings of `env` that the run would not read are refused before anything loads, each
naming the key, its value, why it does nothing and the fix (config/env_keys.py, the
built-ins' env.args in envs/loader.py, an unnamed agent in the schema)."""

from __future__ import annotations

import pytest

import grouprl
from cli_probe import run_cli
from grouprl.config import ConfigError, load_config
from grouprl.config.checks import config_problems
from grouprl.config.env import EnvConfig
from grouprl.config.redact import save_resolved
from grouprl.envs.loader import env_config_problems

CALCULATOR = "examples/envs/calculator.py:Calculator"
AGENT = "env.agent=agent.py:solve"  # config checks only: the file is not looked for


@pytest.fixture
def agent(tmp_path) -> str:
    """An agent file that exists, for the checks that import it (grouprl.load_config)."""
    path = tmp_path / "agent.py"
    path.write_text("def solve(base_url, task, **kwargs):\n    return None\n")
    return f"env.agent={path}:solve"


def _refused(overrides: list[str]) -> str:
    with pytest.raises(ConfigError) as err:
        grouprl.load_config("tiny-arith", overrides)
    return str(err.value)


@pytest.mark.parametrize("env", ["single_turn", "search_qa"])
@pytest.mark.parametrize(
    ("override", "key", "value", "default"),
    [
        ("env.sandbox.workers=4", "env.sandbox.workers", "4 (old name env.workers)", "2"),
        ("env.memory_mb=1024", "env.sandbox.memory_mb", "1024 (old name env.memory_mb)", "8192"),
        (
            "env.sandbox.memory_limit=address_space",
            "env.sandbox.memory_limit",
            "'address_space'",
            "'rss'",
        ),
        (
            "env.step_timeout_s=5",
            "env.sandbox.timeout_s",
            "5.0 (old name env.step_timeout_s)",
            "30.0",
        ),
        ("env.network=false", "env.network", "false", "true"),
        ("env.concurrency=4", "env.concurrency", "4", "16"),
    ],
)
def test_worker_settings_of_a_built_in_environment_are_refused(env, override, key, value, default):
    text = _refused([f"env.name={env}", override])
    assert text.startswith(f"{key}={value} would be ignored: env.name={env} is built in"), text
    assert f"Fix: remove {key} (its default: {default})." in text


def test_your_environment_reads_every_worker_setting():
    workers = ["env.sandbox.workers=4", "env.memory_mb=1024", "env.step_timeout_s=5"]
    more = ["env.sandbox.memory_limit=address_space", "env.network=false", "env.concurrency=4"]
    grouprl.load_config("tiny-arith", [f"env.name={CALCULATOR}", *workers, *more])


def test_a_saved_config_that_writes_every_default_loads(tmp_path):
    """A run's config.yaml sets every key (`grouprl eval RUN` reads it back): a key equal to
    its default is not refused, for a built-in environment or an agent."""
    for overrides in ([], ["env.name=search_qa"], [AGENT]):
        saved = tmp_path / "config.yaml"
        save_resolved(load_config("tiny-arith", overrides), saved)
        assert "concurrency: 16" in saved.read_text()
        assert config_problems(load_config(str(saved), [])) == []


def test_an_agent_refuses_the_environment_step_settings_it_does_not_read(agent):
    text = _refused([agent, "env.concurrency=4", "env.step_timeout_s=5"])
    assert text.startswith("2 problems")
    assert "env.sandbox.timeout_s=5.0 (old name env.step_timeout_s) would be ignored" in text
    assert "bounded by env.agent.timeout_s=600.0. Fix: set env.agent.timeout_s=5.0" in text
    assert "env.concurrency=4 would be ignored" in text
    assert "Fix: set env.agent.concurrency=4 instead, and remove env.concurrency." in text
    grouprl.load_config("tiny-arith", [agent, "env.sandbox.workers=1", "env.memory_mb=512"])


def test_an_agent_without_the_network_is_refused(agent):
    text = _refused([agent, "env.network=false"])
    assert text.startswith("env.network=false with env.agent: your agent reaches the gateway")
    assert "Fix: remove env.network=false" in text


@pytest.mark.parametrize("kind", ["environment", "agent"])
def test_network_off_without_worker_processes_is_refused(kind, agent):
    user = f"env.name={CALCULATOR}" if kind == "environment" else agent
    text = _refused([user, "env.sandbox.workers=0", "env.network=false"])
    assert text.startswith("env.network=false cannot be kept with env.sandbox.workers=0")
    assert "Fix: env.sandbox.workers=1 or more" in text and "or remove env.network." in text
    grouprl.load_config("tiny-arith", [user, "env.sandbox.workers=0"])


@pytest.mark.parametrize(
    ("old", "key"),
    [
        ("tool_timeout_s", "timeout_s"),
        ("tool_max_chars", "max_chars"),
        ("corpus", "corpus"),
        ("search_k", "k"),
        ("turn_reward", "turn_reward"),
    ],
)
def test_search_qa_settings_with_another_built_in_are_refused_naming_the_old_key(old, key):
    (problem,) = env_config_problems(EnvConfig(**{old: 3}))
    assert problem.startswith(
        f"env.args.{key}: env.name=single_turn is built in and takes no env.args, so "
        f"env.args.{key}=3 would be ignored. It is a setting of env.name=search_qa."
    )
    assert f"Fix: remove env.args.{key} (old name env.{old}), or set env.name=search_qa" in problem
    (other,) = env_config_problems(EnvConfig(args={"x": 1}))
    assert other.endswith("env.args.x=1 would be ignored. Fix: remove env.args.x.")


@pytest.mark.parametrize(
    ("override", "key", "old"),
    [
        ("env.agent.timeout_s=30", "env.agent.timeout_s", "env.agent_timeout_s"),
        ("env.agent_concurrency=4", "env.agent.concurrency", "env.agent_concurrency"),
    ],
)
def test_agent_settings_without_an_agent_are_refused(override, key, old, agent):
    text = _refused([override])
    assert f"{key} (old name {old}) would be ignored: no agent is named (env.agent.name)" in text
    assert f"Fix: name your agent (env.agent=FILE.py:solve) or remove {key}." in text
    assert grouprl.load_config("tiny-arith", [agent, override]).env.agent is not None


@pytest.mark.procs
def test_plan_and_train_refuse_them_before_anything_loads():
    cases = [
        ("env.sandbox.workers=4", "env.sandbox.workers=4 (old name env.workers) would be ignored"),
        ("env.network=false", "env.network=false would be ignored: env.name=single_turn"),
        ("env.tool_max_chars=100", "env.args.max_chars=100 would be ignored"),
        ("env.agent.timeout_s=30", "would be ignored: no agent is named (env.agent.name)"),
        ("checkpoint.best_metric=eval/nope", "checkpoint.best_metric='eval/nope' is not a"),
    ]
    # a model that is not there: were a case let through, train would stop at it anyway
    argvs = [
        ["grouprl", command, "tiny-arith", "model.path=/no/such/model", override]
        for command in ("plan", "train")
        for override, _ in cases
    ]
    outcomes, heavy = run_cli(argvs)
    assert heavy == []
    for outcome, (_, message) in zip(outcomes, cases * 2, strict=True):
        assert message in " ".join(outcome.stderr.split()), outcome.stderr
        assert "Traceback" not in outcome.stderr and outcome.code == "2", outcome
