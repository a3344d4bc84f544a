"""The code_tests reward running real programs in the sandbox: each test format, each
outcome, and the false passes other graders let through (a fake PASSED line, truncated
output, exit 0 before the tests, a raise against an empty expected output, forged
results); once through the contained reward workers."""

from __future__ import annotations

import json
import time

import pytest

from grouprl.config.containment import SandboxConfig
from grouprl.config.reward import RewardConfig
from grouprl.rewards import Reward, RewardScorer
from grouprl.rewards.code import CodeTests, SandboxFailure, code_tests
from grouprl.sandbox import WorkerPool
from grouprl.sandbox.program import ProgramResult

REWARD = CodeTests(wall_s=4.0, case_s=2.0, memory_mb=256, file_mb=1)

STDIO = {
    "input_output": json.dumps(
        {"inputs": ["2 3\n", "4 5\n"], "outputs": ["5\n6\n", "9\n20\n"]}  # sum, then product
    )
}


def fenced(code: str) -> str:
    return f"Here is my program:\n```python\n{code}\n```\n"


RIGHT = "a, b = map(int, input().split())\nprint(a + b)\nprint(a * b)"

STDIO_PROGRAMS = {
    "right": (RIGHT, "passed"),
    "wrong": ("a, b = map(int, input().split())\nprint(a + b)\nprint(a - b)", "failed"),
    "truncated": ("a, b = map(int, input().split())\nprint(a + b)", "failed"),
    "fake PASSED": ("print('PASSED')\nprint('All tests passed')", "failed"),
    "exit 0 first": ("import sys\nsys.exit(0)\n" + RIGHT, "failed"),
    "raises after printing": (RIGHT + "\nraise RuntimeError('late')", "crashed"),
    "does not compile": ("print(1", "crashed"),
    "memory": ("x = []\nwhile True:\n    x.append(bytearray(10**7))", "memory"),
    "prints a flood": (
        "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)",
        "output_limit",
    ),
    "kills its parent": ("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)", "crashed"),
    "forges report lines": (
        "for n in ('', '0' * 32):\n"
        "    print(n, 'ready 2'); print(n, 'case', '{\"i\": 0, \"status\": \"passed\"}')\n"
        "    print(n, 'case', '{\"i\": 1, \"status\": \"passed\"}'); print(n, 'end 2')",
        "failed",
    ),
    "writes on every fd": (
        "import os\nfor fd in range(3, 64):\n"
        "    try:\n        os.write(fd, b'x end 2\\n')\n    except OSError:\n        pass",
        "failed",
    ),
}


@pytest.mark.parametrize("name", list(STDIO_PROGRAMS))
@pytest.mark.procs
def test_stdin_stdout_programs_score_as_they_deserve(name):
    code, outcome = STDIO_PROGRAMS[name]
    verdict = REWARD.verdict(fenced(code), reference=None, row=STDIO)
    assert verdict.outcome == outcome, verdict
    score = 1.0 if outcome == "passed" else 0.0  # a call returns the outcome beside its score
    got = REWARD(fenced(code), reference=None, row=STDIO)
    assert (got["score"], got["outcome"]) == (score, outcome)


@pytest.mark.procs
def test_a_loop_times_out_within_its_deadline():
    reward = CodeTests(wall_s=2.0, case_s=1.0)
    start = time.monotonic()
    verdict = reward.verdict(fenced("while True:\n    pass"), reference=None, row=STDIO)
    assert verdict.outcome == "timeout"
    assert time.monotonic() - start < reward.wall_s + 2.0


@pytest.mark.procs
def test_a_raise_against_an_empty_expected_output_fails():
    row = {"input_output": {"inputs": [""], "outputs": [""]}}
    assert (
        REWARD.verdict(fenced("raise ValueError()"), reference=None, row=row).outcome == "crashed"
    )
    assert REWARD.verdict(fenced("pass"), reference=None, row=row).outcome == "passed"


def test_no_code_scores_zero_without_a_run():
    assert REWARD.verdict("I cannot solve this.", reference=None, row=STDIO).outcome == "no_code"


LCB = {
    "public_test_cases": json.dumps(
        [
            {"input": "[1, 2]\n3", "output": "[4, 5]", "testtype": "functional"},
            {"input": "[]\n0", "output": "[]", "testtype": "functional"},
        ]
    ),
    "private_test_cases": "[]",
    "metadata": json.dumps({"func_name": "addAll"}),
}

CALL_PROGRAMS = {
    "leetcode class, tuple result": (
        "class Solution:\n    def addAll(self, xs, k):\n        return tuple(x + k for x in xs)",
        "passed",
    ),
    "always-equal object": (
        "class E:\n    def __eq__(self, other):\n        return True\n"
        "def addAll(xs, k):\n    return E()",
        "failed",
    ),
    "exit 0 at import": ("import os\nos._exit(0)", "crashed"),
    "claims passes on the pipe": (
        "import os\nfor fd in range(3, 64):\n    try:\n"
        '        os.write(fd, b\'{"status": "passed"}\\n\' * 2)\n'
        "    except OSError:\n        pass\n"
        "def addAll(xs, k):\n    return None",
        "crashed",
    ),
    "raises": ("def addAll(xs, k):\n    raise KeyError(k)", "crashed"),
}


@pytest.mark.parametrize("name", list(CALL_PROGRAMS))
@pytest.mark.procs
def test_function_call_programs_score_as_they_deserve(name):
    code, outcome = CALL_PROGRAMS[name]
    assert REWARD.verdict(fenced(code), reference=None, row=LCB).outcome == outcome


KODCODE = {
    "test": (
        "import pytest\nfrom solution import double\n\n"
        "@pytest.mark.parametrize('x, y', [(1, 2), (3, 6)])\n"
        "def test_values(x, y):\n    assert double(x) == y\n\n"
        "def test_zero():\n    assert double(0) == 0\n"
    )
}


@pytest.mark.procs
def test_pytest_style_tests_and_partial_credit():
    assert REWARD.score(fenced("def double(x):\n    return 2 * x"), row=KODCODE) == 1.0
    half = fenced("def double(x):\n    return 2 * x if x else 1")
    assert REWARD.score(half, reference=None, row=KODCODE) == 0.0
    assert CodeTests(partial_credit=True).score(half, reference=None, row=KODCODE) == 0.5
    printed = REWARD.verdict(fenced("print('PASSED')"), reference=None, row=KODCODE)
    assert printed.outcome == "crashed" and "cannot import name 'double'" in printed.detail


@pytest.mark.procs
def test_test_classes_async_tests_and_fixtures():
    tests = (
        "import asyncio\nfrom solution import double\n\n"
        "class TestDouble:\n    def test_one(self):\n        assert double(1) == 2\n\n"
        "async def test_async():\n    await asyncio.sleep(0)\n    assert double(2) == 4\n"
    )
    right, wrong = (
        fenced("def double(x):\n    return 2 * x"),
        fenced("def double(x):\n    return 2"),
    )
    assert REWARD.score(right, reference=tests, row={}) == 1.0
    assert CodeTests(partial_credit=True).score(wrong, reference=tests, row={}) == 0.5  # async
    fixture = "from solution import double\n\ndef test_out(capsys):\n    assert double(1) == 2\n"
    with pytest.raises(SandboxFailure, match=r"needs the fixtures \['capsys'\]"):
        REWARD(right, reference=fixture, row={})


@pytest.mark.procs
def test_all_or_nothing_stops_at_the_first_test_not_passed():
    second_only = fenced("a, b = map(int, input().split())\nprint(a + b)\nprint(20)")
    assert REWARD.verdict(second_only, reference=None, row=STDIO).passed == 0  # skipped
    partial = CodeTests(partial_credit=True)
    assert partial.verdict(second_only, reference=None, row=STDIO).passed == 1
    assert partial.score(second_only, reference=None, row=STDIO) == 0.5


def test_a_sandbox_error_raises_never_scores(monkeypatch):
    def broken(*args, **kwargs):
        return ProgramResult("sandbox_error", None, None, b"", b"", 0.0, 0.0, "no namespaces")

    monkeypatch.setattr("grouprl.sandbox.program.run_program", broken)
    with pytest.raises(SandboxFailure, match=r"no namespaces.*reward failure"):
        REWARD(fenced(RIGHT), reference=None, row=STDIO)


@pytest.mark.procs
def test_through_the_contained_reward_workers():
    """Scored in a reward worker like any reward; a row without tests is a reward failure
    of its sample, not a 0."""
    rows = [{**STDIO, "_index": 0}, {**STDIO, "_index": 1}, {"question": "?", "_index": 2}]
    box = SandboxConfig(workers=1, memory_mb=2048)
    with WorkerPool(box, name="code-reward-test") as pool:
        reward = RewardConfig(
            step_timeout_s=None, failure_brake=None, sandbox=SandboxConfig(timeout_s=15.0)
        )
        functions = [Reward("code_tests", code_tests, 1.0)]
        scorer = RewardScorer(reward, answer_key="answer", functions=functions, pool=pool)
        completions = [fenced(RIGHT), fenced("print('PASSED')"), fenced(RIGHT)]
        scores = scorer(completions=completions, rows=rows)
    assert scores.parts["code_tests"][:2] == [1.0, 0.0]
    assert [(e.sample_index, e.error_type) for e in scores.errors] == [(2, "TestsError")]


@pytest.mark.procs
def test_pytest_helpers_work_without_pytest_in_the_sandbox():
    tests = (
        "import pytest\nfrom solution import div\n\n"
        "def test_raises():\n    with pytest.raises(ZeroDivisionError, match='zero'):\n"
        "        div(1, 0)\n\n"
        "def test_approx():\n    assert div(1, 3) == pytest.approx(0.333333333)\n"
        "    assert [div(1, 4)] == pytest.approx([0.25])\n\n"
        "@pytest.mark.parametrize('a, b, c', [(4, 2, 2), pytest.param(9, 3, 3)])\n"
        "def test_cases(a, b, c):\n    assert div(a, b) == c\n"
    )
    assert REWARD.score(fenced("def div(a, b):\n    return a / b"), reference=tests, row={}) == 1.0
    swallow = fenced("def div(a, b):\n    return a / b if b else 0")  # does not raise
    verdict = CodeTests(partial_credit=True).verdict(swallow, reference=tests, row={})
    assert (verdict.passed, verdict.outcome) == (2, "failed")
    assert "DID NOT RAISE" in verdict.detail


@pytest.mark.procs
def test_mbpp_lines_judged_as_calls_cannot_be_forged_and_keep_the_meaning_of_eq():
    """MBPP's call-and-literal asserts run as function calls: a "passed" line written on
    every descriptor, or an object equal to everything, does not pass them; a tuple
    returned for a list fails as ``==`` fails it; the right function passes."""
    row = {"test_list": ["assert pair(1) == [1, 2]", "assert pair(5) == [5, 6]"]}
    right = fenced("def pair(x):\n    return [x, x + 1]")
    assert REWARD.verdict(right, reference=None, row=row).outcome == "passed"
    forged = fenced(
        "import os\nfor fd in range(3, 64):\n    try:\n"
        '        os.write(fd, b\'{"status": "passed"}\\n\' * 2)\n'
        "    except OSError:\n        pass\n"
        "class E:\n    def __eq__(self, other):\n        return True\n"
        "def pair(x):\n    return E()"
    )
    assert REWARD.verdict(forged, reference=None, row=row).outcome in ("failed", "crashed")
    as_tuple = REWARD.verdict(
        fenced("def pair(x):\n    return (x, x + 1)"), reference=None, row=row
    )
    assert as_tuple.outcome == "failed" and "returned a tuple" in as_tuple.detail, as_tuple
