"""The code_tests reward's rules: extraction, test formats into one form, output
comparison (the one place here that runs a program: an echo, through the real harness),
the report's parsing and the judge's outcome table."""

from __future__ import annotations

import base64
import json
import os
import pickle
import zlib

import pytest

from grouprl.rewards.code import (
    CodeTests,
    SandboxFailure,
    TestsError,
    Verdict,
    extract_code,
    judge,
    load_tests,
)
from grouprl.rewards.code.harness import normalise, same_value
from grouprl.rewards.code.run_harness import CaseResult, HarnessRun, parse_report, run_tests
from grouprl.rewards.code.tests_format import ProblemTests
from grouprl.rewards.registry import REWARD_FUNCTIONS
from grouprl.sandbox.program import ProgramLimits, ProgramResult

# --- extraction -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("completion", "code"),
    [
        ("Here:\n```python\nprint(1)\n```\nand better:\n```python\nprint(2)\n```", "print(2)\n"),
        ("```py\nx = 1\n```\n```\nuntagged = 1\n```", "x = 1\n"),  # tagged beats untagged
        ("```\nprint(3)\n```", "print(3)\n"),
        ("```cpp\nint main() {}\n```", None),  # another language is not Python
        ("<think>```python\nprint(0)\n```</think>\n```python\nprint(1)\n```", "print(1)\n"),
        ("<think>still thinking ```python\nprint(0)\n```", None),  # cut off while thinking
        ("```python\nprint(1)\n", None),  # a fence that never closes
        ("```python\n\n```", None),  # empty code
        ("print(sum(map(int, input().split())))", "print(sum(map(int, input().split())))"),
        ("The answer is five.", None),  # bare text that is not Python
    ],
)
def test_extract_code_rules(completion, code):
    assert extract_code(completion) == code


def test_bare_code_can_be_turned_off():
    assert extract_code("print(1)", bare_code=False) is None


# --- formats into one form ------------------------------------------------------------------


def lcb_compressed(cases: list[dict]) -> str:
    """LiveCodeBench code_generation_lite's private_test_cases encoding."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(cases)))).decode()


def test_apps_stdio_input_output_with_outputs_as_line_lists():
    row = {"input_output": json.dumps({"inputs": ["1 2\n"], "outputs": [["3", "x"]]})}
    tests = load_tests(None, row)
    assert (tests.kind, tests.cases) == ("stdio", ({"stdin": "1 2\n", "expected": "3\nx"},))


def test_apps_call_based_arguments_list_and_wrapped_value():
    row = {"input_output": {"inputs": [[1, 2]], "outputs": [[3]], "fn_name": "add"}}
    tests = load_tests(None, row)
    assert tests.kind == "call" and tests.fn_name == "add"
    assert tests.cases == ({"args": [1, 2], "expected": [3], "wrapped": True},)


def test_livecodebench_public_and_compressed_private_cases_functional():
    row = {
        "public_test_cases": json.dumps(
            [{"input": "[1, 2]\n3", "output": "[4, 5]", "testtype": "functional"}]
        ),
        "private_test_cases": lcb_compressed(
            [{"input": '"ab"\n0', "output": '"ab"', "testtype": "functional"}]
        ),
        "metadata": json.dumps({"func_name": "solve"}),
    }
    tests = load_tests(None, row)
    assert tests.kind == "call" and tests.fn_name == "solve"
    assert tests.cases == (
        {"args": [[1, 2], 3], "expected": [4, 5], "wrapped": False},
        {"args": ["ab", 0], "expected": "ab", "wrapped": False},
    )


def test_livecodebench_stdin_cases():
    row = {
        "public_test_cases": json.dumps([{"input": "3\n", "output": "6\n", "testtype": "stdin"}]),
        "private_test_cases": lcb_compressed(
            [{"input": "1\n", "output": "2\n", "testtype": "stdin"}]
        ),
        "metadata": "{}",
    }
    both = ({"stdin": "3\n", "expected": "6\n"}, {"stdin": "1\n", "expected": "2\n"})
    assert load_tests(None, row).cases == both
    # data.answer_key=public_test_cases: the private cases are read too, never skipped
    assert load_tests(row["public_test_cases"], row).cases == both


class Payload:
    def __reduce__(self):
        return (os.getcwd, ())


def test_a_pickle_that_names_a_function_is_refused():
    text = base64.b64encode(zlib.compress(pickle.dumps(Payload()))).decode()
    row = {"public_test_cases": "[]", "private_test_cases": text}
    with pytest.raises(TestsError, match=r"UnpicklingError: refused posix.getcwd"):
        load_tests(None, row)


def test_open_r1_verification_info_and_deepcoder_tests_list():
    info = {
        "language": "python",
        "test_cases": [{"input": "1\n", "output": "1\n", "type": "stdin_stdout"}],
    }
    assert load_tests(None, {"verification_info": info}).cases == (
        {"stdin": "1\n", "expected": "1\n"},
    )
    with pytest.raises(TestsError, match="language 'cpp'"):
        load_tests(None, {"verification_info": {**info, "language": "cpp"}})
    tests = [{"input": "[2]", "output": "4", "testtype": "functional"}]
    got = load_tests(json.dumps(tests), {"metadata": {"func_name": "sq"}})
    assert got.cases == ({"args": [[2]], "expected": 4, "wrapped": False},)
    # DeepCoder's primeintellect and lcbv5 rows name the function in each case
    for named in ({"fn_name": "sq"}, {"metadata": {"func_name": "sq"}}):
        got = load_tests([{**tests[0], "type": "function_call", **named}], {})
        assert (got.kind, got.fn_name) == ("call", "sq")


def test_kodcode_pytest_functions_are_the_tests_in_source_order():
    code = (
        "from solution import f\n\n"
        "def test_b():\n    assert f(1) == 2\n\n"
        "def test_a():\n    assert f(0) == 1\n"
    )
    tests = load_tests(None, {"test": code})
    assert tests.kind == "assert" and tests.cases == ("test_b", "test_a")
    assert tests.test_code.startswith("from solution import *\n")


def test_mbpp_asserts_humaneval_check_and_plain_asserts():
    mbpp = load_tests(
        None,
        {"test_list": ["assert f(1) == 2", "assert f(2) == 3"], "test_setup_code": "import math"},
    )
    assert mbpp.cases == ("test_0", "test_1") and "import math" in mbpp.test_code
    humaneval = "def check(candidate):\n    assert candidate(1) == 2\n"
    tests = load_tests(humaneval, {"entry_point": "inc"})
    assert tests.cases == ("test_check",) and "check(inc)" in tests.test_code
    plain = load_tests("assert f(1) == 2\nassert g(2) == 3", {})  # two functions: asserts
    assert plain.cases == ("test_asserts",)


def test_assert_lines_of_a_call_and_a_literal_become_function_call_tests():
    """``assert f(<literals>) == <literal>`` lines (MBPP's, plain asserts) are judged as
    function calls, outside the program's process; lines whose values a JSON round trip
    would change (a tuple, a set), setup code, or any other shape keep them asserts."""
    mbpp = load_tests(
        None, {"test_list": ["assert f([1], 'a') == {'k': [2.5, None]}", "assert f([], '') == -3"]}
    )
    assert (mbpp.kind, mbpp.fn_name) == ("call", "f")
    assert mbpp.cases == (
        {"args": [[1], "a"], "expected": {"k": [2.5, None]}, "wrapped": False, "strict": True},
        {"args": [[], ""], "expected": -3, "wrapped": False, "strict": True},
    )
    plain = load_tests("from solution import *\nassert f(1) == 2\nassert f(2) == 3, 'msg'", {})
    assert plain.kind == "assert"  # (an import among them: asserts)
    assert load_tests("assert f(1) == 2\nassert f(2) == 3, 'msg'", {}).kind == "call"
    for lines in (
        ["assert f(1) == (1, 2)"],  # a tuple would arrive as a list
        ["assert f({1, 2}) == 1"],
        ["assert f(x=1) == 1"],
        ["assert set(f(1)) == {1}"],
        ["assert f(1) != 2"],
        ["assert f(1) == 2", "assert g(1) == 2"],
        ["assert math.isclose(f(1), 2.0)"],
    ):
        assert load_tests(None, {"test_list": lines}).kind == "assert", lines


def test_asserts_no_test_ever_calls_are_refused_not_passed():
    with pytest.raises(TestsError, match="would pass anything"):
        load_tests("def check(candidate):\n    assert candidate(1) == 2\n", {})


def test_malformed_tests_name_the_row_and_the_field():
    row = {"_index": 7, "tests": [{"inp": "1", "output": "1"}]}
    with pytest.raises(TestsError, match=r"row 7: row field 'tests' is not .*KeyError: 'input'"):
        load_tests(None, row)


def test_a_row_without_tests_names_the_fields():
    with pytest.raises(TestsError, match=r"row 4: no tests found.*input_output"):
        load_tests("42", {"_index": 4, "question": "?"})


# --- comparison -----------------------------------------------------------------------------


STDOUT_CASES = [
    ("3 \r\n4\n\n\n", "3\n4", True),  # trailing spaces, CRLF, trailing newlines
    ("3\n", "3\n4\n", False),  # truncated output fails (no zip over lines)
    ("3\n4\n5\n", "3\n4\n", False),  # extra output fails
    ("  3", "3", False),  # leading spaces count
    ("a\n\nb", "a\nb", False),  # a blank line inside counts
    ("PASSED\n3", "3", False),  # never a substring
    ("3\n", "3\r\n\n", True),  # the expected output is normalised too
    ("Yes", "yes", False),  # case counts
    ("", "", True),
]
ECHO = "import sys\nsys.stdout.buffer.write(sys.stdin.buffer.read())\n"
"""Prints its input byte for byte: a stdio case's input is the output under test."""


@pytest.fixture(scope="module")
def echoed() -> list[CaseResult]:
    """Every case of STDOUT_CASES judged by the real harness (``run_tests``: the sandboxed
    ``harness.py`` compares the program's stdout with the expected text), in one run
    of the echo program: a case's input is the stdout it gets back."""
    cases = tuple({"stdin": got, "expected": expected} for got, expected, _ in STDOUT_CASES)
    run = run_tests(
        ECHO,
        ProblemTests(kind="stdio", cases=cases),
        limits=ProgramLimits(wall_s=20.0, cpu_s=20.0),
        case_s=5.0,
        stop_early=False,
    )
    assert run.complete and not run.error, run
    return run.cases


@pytest.mark.parametrize(("index", "same"), [(i, c[2]) for i, c in enumerate(STDOUT_CASES)])
@pytest.mark.procs
def test_stdout_is_compared_whole_after_normalising(index, same, echoed):
    """The harness's verdict, not a copy of its rule: a change to what it compares (or how
    it normalises either side) fails here."""
    got, expected, _ = STDOUT_CASES[index]
    assert echoed[index].status == ("passed" if same else "failed"), (got, expected, echoed[index])
    assert (normalise(got) == normalise(expected)) is same  # the rule as documented


def test_returned_values_compare_as_json_and_apps_wrapping():
    assert same_value([1, 2], [1, 2], wrapped=False)
    assert not same_value(3, [3], wrapped=False)
    assert same_value(3, [3], wrapped=True)  # APPS's one-element list
    assert not same_value([3], [[3, 4]], wrapped=True)


# --- the report and the judge ---------------------------------------------------------------


def program(outcome="exited", stdout=b"", *, exit_code=0, signal=None, detail=""):
    return ProgramResult(outcome, exit_code, signal, stdout, b"", 0.1, 0.1, detail)


NONCE = "n0nce"


def report(*lines: str) -> bytes:
    return "".join(f"{line}\n" for line in lines).encode()


def test_report_lines_count_only_with_the_nonce_and_the_sentinel():
    ok = report(
        f"{NONCE} ready 2",
        f'{NONCE} case {{"i": 0, "status": "passed"}}',
        'forged case {"i": 1, "status": "passed"}',
        f'{NONCE} case {{"i": 1, "status": "passed"}}',
        f"{NONCE} end 2",
    )
    run = parse_report(program(stdout=ok), nonce=NONCE, total=2)
    assert run.ready and run.complete and [c.status for c in run.cases] == ["passed", "passed"]
    cut = report(
        f"{NONCE} ready 2", f'{NONCE} case {{"i": 0, "status": "passed"}}', f"{NONCE} end 2"
    )
    assert not parse_report(program(stdout=cut), nonce=NONCE, total=2).complete


def run_of(statuses, *, complete=True, outcome="exited", ready=True, error="", signal=None):
    cases = [CaseResult(s, f"why {s}") for s in statuses]
    return HarnessRun(program(outcome, signal=signal), 3, ready, cases, complete, error)


@pytest.mark.parametrize(
    ("run", "outcome", "passed"),
    [
        (run_of(["passed"] * 3), "passed", 3),
        (run_of(["passed", "failed", "skipped"]), "failed", 1),
        (run_of(["error", "passed", "passed"]), "crashed", 2),
        (run_of(["passed", "timeout", "skipped"]), "timeout", 1),
        (run_of(["memory", "skipped", "skipped"]), "memory", 0),
        (run_of(["output_limit", "skipped", "skipped"]), "output_limit", 0),
        (run_of(["tests_error"] * 3), "sandbox_error", 0),
        (run_of(["passed"], complete=False, outcome="timeout"), "timeout", 1),
        (run_of([], complete=False, outcome="memory"), "memory", 0),
        (run_of(["passed"], complete=False, outcome="signaled", signal=9), "crashed", 1),
        (run_of([], complete=False, outcome="exited"), "crashed", 0),  # exited before the end
        (run_of([], complete=False, ready=False), "sandbox_error", 0),  # the harness never ran
        (run_of([], complete=False, error="Traceback ..."), "sandbox_error", 0),
        (run_of([], complete=False, outcome="sandbox_error"), "sandbox_error", 0),
    ],
)
def test_judge_outcomes(run, outcome, passed):
    verdict = judge(run)
    assert (verdict.outcome, verdict.passed, verdict.total) == (outcome, passed, 3)


def test_scores_all_or_nothing_by_default_partial_credit_as_option():
    assert Verdict("passed", 3, 3).score() == 1.0
    assert Verdict("failed", 2, 3).score() == 0.0
    assert Verdict("failed", 2, 4).score(partial_credit=True) == 0.5
    assert Verdict("no_code", 0, 4).score(partial_credit=True) == 0.0
    with pytest.raises(SandboxFailure):
        Verdict("sandbox_error", 0, 3, "no namespaces").score()


def test_registered_and_checked_arguments():
    assert isinstance(REWARD_FUNCTIONS["code_tests"], CodeTests)
    assert REWARD_FUNCTIONS["code_tests"].partial_credit is False
    with pytest.raises(ValueError, match=r"CodeTests\(wall_s=0\)"):
        CodeTests(wall_s=0)
