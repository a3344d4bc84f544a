"""`env.name` by import path and `env.args`: checked against the class before anything
loads, each problem naming its key."""

from __future__ import annotations

import textwrap
import time

import pytest

from cli_probe import run_cli
from grouprl.config.env import EnvConfig
from grouprl.config.errors import ConfigError
from grouprl.config.model_data import DataConfig
from grouprl.envs.factory import make_env
from grouprl.envs.loader import env_config_problems, resolve_env

ENVS = textwrap.dedent(
    """
    from grouprl.envs import EnvContext, Step

    class Counter:
        def __init__(
            self, start: int, *, step: float = 1.0, names: list[str] = (), ctx: EnvContext
        ):
            self.start, self.step, self.ctx = start, step, ctx

        def episode(self, row):
            return None

    class NoEpisode:
        pass

    def factory():
        return Counter(1)
    """
)


@pytest.fixture
def envs_file(tmp_path, monkeypatch):
    (tmp_path / "my_envs.py").write_text(ENVS)
    monkeypatch.chdir(tmp_path)  # file paths are relative to where you run
    return "my_envs.py"


def test_a_class_by_file_path_gets_its_args_and_the_run_context(envs_file, tmp_path):
    cfg = EnvConfig(name=f"{envs_file}:Counter", args={"start": 3, "step": 2}, workers=0)
    assert env_config_problems(cfg) == []
    env = make_env(cfg, DataConfig(prompt_key="problem"), cache_dir=tmp_path / "cache")
    assert (env.start, env.step) == (3, 2)
    assert env.ctx.prompt_key == "problem" and env.ctx.cache_dir == tmp_path / "cache"
    target = resolve_env(cfg)  # the file made absolute: workers and later runs find it
    assert target.name == f"{tmp_path / envs_file}:Counter" and target.user_code


def test_env_args_unknown_missing_and_mistyped_keys_are_each_named(envs_file):
    cfg = EnvConfig(name=f"{envs_file}:Counter", args={"stpe": 2, "names": "a", "step": "x"})
    problems = env_config_problems(cfg)
    assert len(problems) == 4, problems
    assert problems[0].startswith("env.args.stpe: Counter(start, step, names) takes no")
    assert "Did you mean 'step'?" in problems[0]
    assert problems[1].startswith("env.args.start is missing")
    assert problems[2].startswith("env.args.names='a': Counter(start, step, names) expects list")
    assert problems[3].startswith("env.args.step='x'") and "expects float" in problems[3]
    with pytest.raises(ConfigError, match=r"env\.args\.ctx: .* takes no argument 'ctx'"):
        resolve_env(EnvConfig(name=f"{envs_file}:Counter", args={"start": 1, "ctx": 1}))


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("my_envs.py:NoEpisode", "class NoEpisode has no episode(row) method"),
        ("my_envs.py:factory", "is a function, not an environment class"),
        ("my_envs.py:Nope", "my_envs.py has no 'Nope'; its classes and functions are"),
        ("missing.py:Foo", "missing.py' does not exist"),
        ("grouprl_no_such_pkg.envs:Foo", "cannot import module 'grouprl_no_such_pkg.envs'"),
        ("nope", "env.name='nope' is not an environment"),
    ],
)
def test_a_bad_env_name_says_what_is_wrong(envs_file, name, message):
    (problem,) = env_config_problems(EnvConfig(name=name))
    assert problem.startswith(f"env.name={name!r}") and message in problem, problem


def test_built_ins_take_only_their_own_env_args_and_missing_modules_wait_for_the_cluster():
    (problem,) = env_config_problems(EnvConfig(name="single_turn", args={"k": 1}))
    assert problem.startswith("env.args.k: env.name=single_turn is built in")
    assert env_config_problems(EnvConfig(name="search_qa", args={"k": 3, "corpus": "d"})) == []
    (problem,) = env_config_problems(EnvConfig(name="search_qa", args={"kk": 1}))
    assert problem.startswith("env.args.kk: SearchQA(corpus, k, max_chars, timeout_s, turn_")
    assert "Did you mean 'k'?" in problem
    (problem,) = env_config_problems(EnvConfig(name="search_qa", args={"turn_reward": "x"}))
    assert problem.startswith("env.args.turn_reward='x': SearchQA(") and "expects" in problem
    (problem,) = env_config_problems(EnvConfig(name="search_qa", args={"k": 0}))
    assert problem.startswith("env.args.k=0: SearchQA(") and "greater than or equal to 1" in problem
    absent = EnvConfig(name="grouprl_no_such_pkg.envs:Foo")
    assert env_config_problems(absent, missing_ok=True) == []


@pytest.mark.procs
def test_bad_env_names_fail_in_plan_and_train_fast_before_anything_heavy_loads(envs_file):
    cases = [
        ("env.name=nope.mod:Foo", "env.name='nope.mod:Foo': cannot import module 'nope.mod'"),
        ("env.name=missing.py:Foo", "env.name='missing.py:Foo': file"),
        ("env.name=my_envs.py:NoEpisode", "class NoEpisode has no episode(row) method"),
    ]
    argvs = [
        ["grouprl", command, "tiny-arith", "data.eval=null", override]
        for command in ("plan", "train")
        for override, _ in cases
    ]
    started = time.perf_counter()
    outcomes, heavy = run_cli(argvs)
    assert heavy == []
    for outcome, (_, message) in zip(outcomes, cases * 2, strict=True):
        assert message in " ".join(outcome.stderr.split()), outcome.stderr
        assert "Traceback" not in outcome.stderr
        assert outcome.code == "2" and outcome.seconds < 2.0, outcome
    assert time.perf_counter() - started < 2.0 + 6 * 2.0  # the interpreter, then each case
