"""The ``math_verify`` reward: math-verify's own verdicts, from a reward worker's call
thread (where math-verify's signal.alarm cannot run), with its timeouts working there, and
through the contained reward workers."""

from __future__ import annotations

import functools
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from grouprl.config.containment import SandboxConfig
from grouprl.config.reward import RewardConfig, RewardFunction
from grouprl.rewards import REWARD_FUNCTIONS, RewardScorer, register_reward
from grouprl.rewards.math_verify import gold_text, math_verify_score

math_verify = pytest.importorskip("math_verify", reason="the graders extra (make install)")

CASES = [
    # (reference, completion, math-verify's verdict)
    ("$\\frac{1}{2}$", "So the answer is $\\frac{2}{4}$.", True),  # equal fractions
    ("1/2", "The probability is \\boxed{0.5}", True),  # plain vs LaTeX, plain reference
    ("$\\frac{3}{4}$", "The answer is 0.75", True),  # LaTeX reference, plain answer
    ("$\\frac{\\sqrt{2}}{2}$", "$\\frac{1}{\\sqrt{2}}$", True),  # symbolic equality
    ("x+1", "We get $1+x$.", True),  # a bare expression (boxed before parsing)
    ("$\\{1, 2\\}$", "The set is $\\{2, 1\\}$", True),  # sets, any order
    ("$[0, 1)$", "The interval is $[0,1)$", True),
    ("$(0, 1)$", "The interval is $[0,1]$", False),  # closed is not open
    ("3 + 2 = 5\n#### 5", "Adding, 3 + 2 = 5.\n#### 5", True),  # GSM8K's marked answer
    ("$5$", "The answer is 7", False),  # wrong
    ("$5$", "I cannot tell.", False),  # no answer in the completion
    ("$5$", "\\boxed{\\frac{1}{", False),  # unparsable LaTeX
]

# Sympy integrates this for ~40 s (measured 43 s on 2 busy cores), in Python bytecode.
SLOW_REFERENCE = "$\\int_0^1 e^{-x^2} \\sin(x)^3 dx$"
BUDGET_S = 2.0
"""The slow case's budget: the other cases' parsing must fit in it on a loaded machine
(at a load of 15 on 2 cores, parsing the integral alone took over 1 s)."""


def _on_main_thread(reference: str, completion: str) -> bool:
    """math-verify's own verdict, its signal.alarm timeouts on (main thread only)."""
    assert threading.current_thread() is threading.main_thread()
    return math_verify.verify(
        math_verify.parse(gold_text(reference)), math_verify.parse(completion)
    )


def test_the_table_is_math_verifys_own_verdicts():
    for reference, completion, verdict in CASES:
        assert _on_main_thread(reference, completion) is verdict, (reference, completion)


def test_the_reward_agrees_with_math_verify_from_other_threads():
    expected = [float(_on_main_thread(ref, completion)) for ref, completion, _ in CASES]
    with ThreadPoolExecutor(2) as threads:  # as a reward worker runs calls
        got = list(threads.map(lambda c: math_verify_score(c[1], reference=c[0]), CASES))
    assert got == expected


def test_math_verifys_own_timeout_fails_off_the_main_thread():
    """Why the reward rings math-verify's alarm itself: its signal.alarm raises there."""
    with ThreadPoolExecutor(1) as thread:
        call = thread.submit(math_verify.parse, "$\\frac{1}{2}$")
        with pytest.raises(ValueError, match="threaded environment"):
            call.result()


def test_a_slow_comparison_times_out_in_its_thread_and_the_thread_scores_on():
    def slow_then_quick() -> tuple[BaseException | None, float, float]:
        start = time.monotonic()
        try:
            math_verify_score("$0.3$", reference=SLOW_REFERENCE, timeout_s=BUDGET_S)
        except TimeoutError as err:
            error: BaseException | None = err
        else:
            error = None
        took = time.monotonic() - start
        return error, took, math_verify_score("$\\frac{2}{4}$", reference="1/2")

    with ThreadPoolExecutor(1) as thread:
        error, took, after = thread.submit(slow_then_quick).result()
    assert isinstance(error, TimeoutError) and "s budget" in str(error)
    assert took < BUDGET_S + 6.0, took  # its budget, plus a busy machine's slack (sympy: 40 s)
    assert after == 1.0  # no alarm left pending in the thread


def test_a_reference_without_an_answer_fails_the_call_not_the_completion():
    with pytest.raises(ValueError, match="the reference '' stands for a missing answer"):
        math_verify_score("$5$", reference="")
    with pytest.raises(ValueError, match=r"reads as the product .*, not a math answer"):
        math_verify_score("$5$", reference="see the text")


@pytest.mark.procs
def test_in_the_reward_workers_a_timeout_fails_its_sample_alone():
    """The reward in a contained worker (a 2 s budget: ``functools.partial``, as
    docs/rewards.md shows): verdicts as above, and a comparison past its budget a failed
    sample (left out of training), not a 0, with the worker alive."""
    register_reward("test_math_verify_2s", functools.partial(math_verify_score, timeout_s=BUDGET_S))
    rows = [
        {"answer": "1/2", "_index": 0},
        {"answer": "$5$", "_index": 1},
        {"answer": SLOW_REFERENCE, "_index": 2},
    ]
    try:
        reward = RewardConfig(
            functions=[RewardFunction(name="test_math_verify_2s")],
            step_timeout_s=None,
            failure_brake=None,
            # the worker's deadline, far past the reward's own budget
            sandbox=SandboxConfig(workers=1, memory_mb=None, timeout_s=30.0),
        )
        scorer = RewardScorer(reward, answer_key="answer")
        try:
            scores = scorer(completions=["\\boxed{0.5}", "7", "$0.3$"], rows=rows)
        finally:
            scorer.close()
    finally:
        REWARD_FUNCTIONS.pop("test_math_verify_2s")
    assert scores.parts["test_math_verify_2s"][:2] == [1.0, 0.0]
    [failure] = scores.errors
    assert (failure.kind, failure.error_type, failure.sample_index) == ("error", "TimeoutError", 2)
    assert "ran past the call's 2 s budget" in failure.message
    assert scores.worker_restarts == 0  # rung in its thread; the worker lives on
