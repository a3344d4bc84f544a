"""The code-execution reward, ``code_tests``: a completion's program (``extract``) run
against its problem's tests (``tests_format``: APPS/TACO, LiveCodeBench, open-r1,
KodCode, MBPP, HumanEval) in one sandboxed run per sample (``run_harness``, with
``harness.py`` inside the sandbox), judged honestly (``judge``). docs/code.md."""

from grouprl.rewards.code.extract import extract_code
from grouprl.rewards.code.judge import SandboxFailure, Verdict, judge
from grouprl.rewards.code.reward import CodeTests, code_tests
from grouprl.rewards.code.tests_format import TestsError, load_tests

__all__ = [
    "CodeTests",
    "SandboxFailure",
    "TestsError",
    "Verdict",
    "code_tests",
    "extract_code",
    "judge",
    "load_tests",
]
