"""``reward.functions[i].args``: keywords added to a function's calls (also one named by
path, applied in the worker), a registered settings object's fields replaced; checked
before anything loads, naming the key; and a reward that needs more seconds per call than
``reward.sandbox.timeout_s`` refused then too."""

from __future__ import annotations

import functools
import textwrap

import pytest

from grouprl.config.containment import SandboxConfig
from grouprl.config.reward import RewardConfig, RewardFunction
from grouprl.rewards import RewardError, RewardScorer, resolve_rewards
from grouprl.rewards.args import WithArgs
from grouprl.rewards.code import CodeTests
from grouprl.rewards.registry import reward_problems
from grouprl.rewards.scoring import function_ref, metrics
from grouprl.sandbox import WorkerPool

SCALED = textwrap.dedent(
    """
    def scaled(completion, *, reference, row, scale: float = 1.0, bonus: int = 0):
        return scale * float(completion == reference) + bonus

    def open_ended(completion, **kwargs):
        return float(kwargs.get("level", 0))
    """
)


@pytest.fixture(scope="module")
def scaled(tmp_path_factory):
    path = tmp_path_factory.mktemp("args") / "scaled_rewards.py"
    path.write_text(SCALED)
    return path


@pytest.mark.procs
def test_args_reach_the_calls_of_a_function_named_by_path_and_of_code_tests(scaled):
    entries = [
        RewardFunction(name=f"{scaled}:scaled", args={"scale": 3.0}),
        RewardFunction(name=f"{scaled}:scaled"),  # the same function again, other args
        RewardFunction(name=f"{scaled}:open_ended", args={"level": 2}),
        RewardFunction(name="code_tests", args={"partial_credit": True, "wall_s": 4}),
    ]
    rewards = resolve_rewards(entries)
    assert [r.name for r in rewards] == [
        f"{scaled}:scaled",
        f"{scaled}:scaled_2",
        f"{scaled}:open_ended",
        "code_tests",
    ]
    # a path-named function is sent by name with its args, applied in the worker
    assert function_ref(rewards[0]) == WithArgs(str(scaled) + ":scaled", {"scale": 3.0})
    code = rewards[3].fn  # a new instance, the registered one untouched
    assert isinstance(code, CodeTests) and (code.partial_credit, code.wall_s) == (True, 4)
    assert isinstance(rewards[2].fn, functools.partial)
    with WorkerPool(SandboxConfig(workers=1, memory_mb=1024), name="reward-args-test") as pool:
        reward = RewardConfig(step_timeout_s=None, failure_brake=None)
        scorer = RewardScorer(reward, answer_key="answer", functions=rewards, pool=pool)
        scores = scorer(
            completions=["7"], rows=[{"answer": "7", "_index": 0, "input_output": "{}"}]
        )
    assert scores.parts[f"{scaled}:scaled"] == [3.0]
    assert scores.parts[f"{scaled}:scaled_2"] == [1.0]
    assert scores.parts[f"{scaled}:open_ended"] == [2.0]
    m = metrics(scores)
    assert m["reward/scaled"] == 3.0 and m["reward/scaled_2"] == 1.0


def test_the_same_function_with_the_same_args_is_listed_twice():
    entries = [RewardFunction(name="code_tests", args={"wall_s": 4})] * 2
    with pytest.raises(RewardError, match=r"reward.functions.1.name='code_tests' is listed twice"):
        resolve_rewards(entries)
    assert reward_problems(entries)[0].startswith("reward.functions.1.name='code_tests' is listed")


@pytest.mark.parametrize(
    ("name", "args", "expected"),
    [
        (
            "code_tests",
            {"wall": 4},
            "reward.functions.0.args.wall=4: 'code_tests' is a CodeTests, which has no setting "
            "'wall'; its settings are partial_credit, wall_s,",
        ),
        ("code_tests", {"wall": 4}, "Did you mean 'wall_s'? Fix: remove reward.functions.0.args"),
        (
            "code_tests",
            {"memory_mb": "lots"},
            "reward.functions.0.args.memory_mb='lots': CodeTests.memory_mb is int (",
        ),
        (
            "code_tests",
            {"wall_s": 0},
            "reward.functions.0.args.wall_s=0: 'code_tests' refuses it: CodeTests(wall_s=0): "
            "must be a positive number",
        ),
        (
            "math_answer",
            {"tolerance": 1},
            "args.tolerance=1: 'math_answer' takes no keyword 'tolerance' (its keywords: none",
        ),
        (
            "SCALED:scaled",
            {"reference": "x"},
            "reward.functions.0.args.reference='x': 'reference' is a keyword the scorer passes",
        ),
        ("SCALED:scaled", {"scale": "big"}, "annotates scale as float ("),
        ("SCALED:scaled", {"bonus": True}, "annotates bonus as int ("),
        ("SCALED:scaled", {"scael": 2}, "takes no keyword 'scael' (its keywords: scale, bonus)"),
    ],
)
def test_bad_args_are_refused_before_anything_loads_naming_the_key(scaled, name, args, expected):
    name = name.replace("SCALED", str(scaled))
    [problem] = reward_problems([RewardFunction(name=name, args=args)])
    assert expected in problem
    assert "Fix:" in problem
    with pytest.raises(RewardError, match=r"reward.functions.0.args"):
        resolve_rewards([RewardFunction(name=name, args=args)])


def test_kwargs_take_any_arg_and_a_fitting_value_passes(scaled):
    entries = [
        RewardFunction(name=f"{scaled}:open_ended", args={"anything": [1, 2]}),
        RewardFunction(name=f"{scaled}:scaled", args={"scale": 2, "bonus": 1}),  # int: a float
        RewardFunction(name="code_tests", args={"cpu_s": None, "memory_mb": 256}),
    ]
    assert reward_problems(entries, timeout_s=10) == []


def test_a_code_tests_wall_s_too_close_to_the_workers_deadline_is_refused():
    """A program stopped at wall_s scores 0 as a timeout; a call killed at the worker's
    deadline is a reward failure: wall_s must be 2 s below reward.sandbox.timeout_s."""
    assert reward_problems([RewardFunction(name="code_tests")], timeout_s=10) == []  # 8 + 2
    [default] = reward_problems([RewardFunction(name="code_tests")], timeout_s=9)
    assert default.startswith("reward.functions.0.args.wall_s=8 (its default) with ")
    assert "reward.sandbox.timeout_s=9: 'code_tests' needs up to 10s per call" in default
    entry = RewardFunction(name="code_tests", args={"wall_s": 12.5})
    [given] = reward_problems([RewardFunction(name="math_answer"), entry], timeout_s=10)
    assert given.startswith("reward.functions.1.args.wall_s=12.5 with reward.sandbox.timeout_s=10")
    assert given.endswith(
        "Fix: set reward.sandbox.timeout_s=14.5 or more, or reward.functions.1.args.wall_s=8 "
        "or less"
    )


def test_the_run_check_passes_reward_sandbox_timeout_s():
    from grouprl.config.loader import load_config
    from grouprl.driver.preflight import input_problems

    cfg = load_config(
        "tiny-arith",
        [
            "reward.functions=[{name: code_tests, args: {wall_s: 9}}]",
            "reward.correct_function=null",
        ],
    )
    problems = [p for p in input_problems(cfg) if p.startswith("reward.functions")]
    assert [p.split(" with ")[0] for p in problems] == ["reward.functions.0.args.wall_s=9"]


def test_an_arg_may_give_a_required_keyword(tmp_path):
    path = tmp_path / "needs_level.py"
    path.write_text("def leveled(completion, *, reference, row, level: int):\n    return level\n")
    entry = RewardFunction(name=f"{path}:leveled", args={"level": 3})
    assert reward_problems([entry]) == []
    [reward] = resolve_rewards([entry])
    assert reward.style == "grouprl" and reward.fn("x", reference=None, row={}) == 3
    assert "fit no style" in reward_problems([RewardFunction(name=f"{path}:leveled")])[0]
