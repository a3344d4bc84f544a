"""A sample's outcome from its sandboxed run, and its score.

::

    no code in the completion ─────────────────────────────────────────► no_code
    the sandbox failed to run it, the harness failed, tests did not load ► sandbox_error
    the sentinel came (every test reported):  all passed ──────────────► passed
                                              else the first test not passed:
                                              failed | crashed (error) | timeout |
                                              memory | output_limit
    no sentinel (the harness was killed):     the sandbox's reason: timeout (wall_s or
                                              cpu_s) | memory | output_limit; else
                                              crashed (the program killed its parent)

``sandbox_error`` is never a score: the reward raises, so the sample is a reward failure
(``reward.on_error``: left out of training by default), not a 0 the policy learns from.
Every other outcome scores 1.0 for ``passed`` and 0.0 otherwise, or with partial credit
the fraction of tests that passed (tests not reported count as not passed).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Literal, get_args

from grouprl.rewards.code.run_harness import HarnessRun

Outcome = Literal[
    "passed",
    "failed",
    "timeout",
    "memory",
    "crashed",
    "output_limit",
    "sandbox_error",
    "no_code",
]
OUTCOMES: tuple[str, ...] = get_args(Outcome)

CASE_OUTCOMES: dict[str, Outcome] = {
    "passed": "passed",
    "failed": "failed",
    "error": "crashed",
    "timeout": "timeout",
    "memory": "memory",
    "output_limit": "output_limit",
    "tests_error": "sandbox_error",
}
"""A test's status (``harness.py``) as a sample's outcome."""

KILLED: dict[str, Outcome] = {
    "timeout": "timeout",
    "memory": "memory",
    "output_limit": "output_limit",
}
"""The sandbox's reason for ending a run before the sentinel, as an outcome."""


class SandboxFailure(RuntimeError):
    """The sandbox, the harness or the problem's tests failed, not the program: the
    sample is a reward failure, never scored."""


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    passed: int = 0
    """Tests passed (of those the harness reported)."""
    total: int = 0
    detail: str = ""
    """Why, in words: the first test not passed, or how the run ended."""

    def score(self, *, partial_credit: bool = False) -> float:
        """1.0 for ``passed``, else 0.0; with ``partial_credit`` the fraction of tests
        passed. Raises ``SandboxFailure`` for ``sandbox_error``: it is no score."""
        if self.outcome == "sandbox_error":
            raise SandboxFailure(self.detail)
        if partial_credit and self.total:
            return self.passed / self.total
        return 1.0 if self.outcome == "passed" else 0.0


def judge(run: HarnessRun) -> Verdict:
    """The outcome of one sandboxed run (module docstring)."""
    program = run.program
    passed = sum(c.status == "passed" for c in run.cases)
    if program.outcome == "sandbox_error":
        return Verdict("sandbox_error", total=run.total, detail=f"sandbox: {program.detail}")
    if run.error:
        return Verdict("sandbox_error", total=run.total, detail=f"the harness failed: {run.error}")
    if not run.ready:
        stderr = program.stderr.decode("utf-8", errors="replace").strip()[-300:]
        detail = f"the harness did not start ({_ended(run)}): {stderr}"
        return Verdict("sandbox_error", total=run.total, detail=detail)
    if run.complete:
        first = next((c for c in run.cases if c.status != "passed"), None)
        if first is None:
            return Verdict("passed", passed, run.total)
        return Verdict(CASE_OUTCOMES.get(first.status, "crashed"), passed, run.total, first.detail)
    outcome = KILLED.get(program.outcome, "crashed")
    if program.outcome == "signaled" and program.signal == signal.SIGXCPU:
        outcome = "timeout"  # the run's CPU seconds (cpu_s), spent: a timeout, as documented
    return Verdict(
        outcome,
        passed,
        run.total,
        f"no sentinel after {len(run.cases)} of {run.total} tests ({_ended(run)})",
    )


def _ended(run: HarnessRun) -> str:
    p = run.program
    if p.outcome == "exited":
        return f"exited with {p.exit_code}"
    if p.outcome == "signaled":
        return f"killed by signal {p.signal}"
    return f"{p.outcome} after {p.wall_s:.2f}s{': ' + p.detail if p.detail else ''}"
