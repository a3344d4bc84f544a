"""The built-in code task (``builtin:code``): fixed disjoint splits, tests in the format
``code_tests`` reads, canonical programs that pass them in the sandbox and near misses
that do not."""

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from grouprl.assets import code
from grouprl.assets.datasets import builtin_rows, split_sizes
from grouprl.rewards.code import CodeTests, load_tests


@pytest.fixture(scope="module")
def test_split():
    return code.code_split("test")


def test_splits_are_disjoint_fixed_and_mixed(test_split):
    train = code.code_split("train", size=4000)
    assert not {p.question for p in train} & {p.question for p in test_split}
    assert code.code_split("test", size=3) == test_split[:3]  # seeded: the same every time
    kinds = [p.kind for p in test_split]
    assert 0.4 < kinds.count("print") / len(kinds) < 0.6
    assert {p.topic for p in test_split if p.kind == "function"} == set(code.TEMPLATE_NAMES)


def test_rows_carry_tests_code_tests_reads():
    rows, columns = builtin_rows("builtin:code", split="test", size=20)
    assert split_sizes("builtin:code") == {"train": 20_000, "test": 500}
    assert columns == sorted(rows[0]) == ["input_output", "kind", "question", "solution", "topic"]
    for row in rows:
        tests = load_tests(row["input_output"], row)
        if row["kind"] == "print":
            assert tests.kind == "stdio" and tests.cases[0]["stdin"] == ""
            assert row["question"].startswith(code.PRINT_PROMPT)
        else:
            assert tests.kind == "call" and len(tests.cases) == code.CASES
            assert f"`{tests.fn_name}(" in row["question"]


def test_print_expression_keeps_the_order_of_the_steps():
    assert code._expression("7 + 5 = 12. 12 * 2 = 24. 24 - 3 = 21.") == (
        "(7 + 5) * 2 - 3",
        "7 + 5",
    )
    assert code._expression("4 * 3 = 12. 12 - 5 = 7.") == ("4 * 3 - 5", "4 * 3")


def test_near_misses_fail_the_drawn_inputs(test_split):
    """At generation: every function problem's tests tell its near miss from the solution."""
    for t in code.TEMPLATES:
        problem = next(p for p in test_split if p.topic == t.name)
        inputs = [json.loads(x) for x in problem.tests["inputs"]]
        outputs = [json.loads(y) for y in problem.tests["outputs"]]
        assert outputs != [t.near_fn(x, _constant(problem, t)) for x in inputs], t.name


def _constant(problem: code.CodeProblem, template: code.Template) -> int:
    """The template's constant ``k`` of ``problem``: the one that rebuilds its question."""
    fn_arg = problem.question.split("`")[1]
    arg = fn_arg[fn_arg.index("(") + 1 : -1]
    for k in range(template.ks[0], template.ks[1] + 1):
        task = template.task.format(a=arg, k=k, c="aeiou"[k % 5])
        if problem.question.endswith(f" that {task}."):
            return k
    raise AssertionError(f"no constant rebuilds {problem.question!r}")


@pytest.mark.procs
def test_solutions_pass_and_near_misses_fail_in_the_sandbox(test_split):
    """Through ``code_tests`` itself: one problem per template and per kind of print habit
    (the first step alone, no print)."""
    reward = CodeTests()
    picked = [next(p for p in test_split if p.topic == name) for name in code.TEMPLATE_NAMES]
    story = test_split[0]  # a story whose first step is not its answer (10 - 7 vs 8)
    assert story.kind == "print" and story.near_miss == "```python\nprint(10 - 7)\n```"
    no_print = story.solution.replace("print(", "", 1).replace(")\n```", "\n```")
    runs = [(p.solution, p) for p in [*picked, story]]
    runs += [(p.near_miss, p) for p in [*picked, story]] + [(no_print, story)]

    def outcome(run: tuple[str, code.CodeProblem]) -> str:
        program, problem = run
        tests = json.dumps(problem.tests)
        return reward.verdict(program, reference=tests, row={"input_output": tests}).outcome

    with ThreadPoolExecutor(4) as pool:
        outcomes = list(pool.map(outcome, runs))
    passed = len(picked) + 1
    assert outcomes == ["passed"] * passed + ["failed"] * passed + ["failed"], [
        (o, p.question) for o, (_, p) in zip(outcomes, runs, strict=True)
    ]
