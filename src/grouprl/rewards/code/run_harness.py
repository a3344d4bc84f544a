"""One sandboxed run per sample for all of its problem's tests: the host side.

::

    code, ProblemTests ──► run_program([PYTHON, "harness.py"], files={harness.py,
                           solution.py}, stdin={nonce, mode, cases, budget})
                           (grouprl.sandbox.program: private dir, limits, killed whole)
                       ◄── ProgramResult: the harness's stdout ──► HarnessRun (parsed:
                           ready?, each case's status, the sentinel seen?)

The harness itself (``harness.py``) runs the program per case and compares. Only
lines that start with this run's nonce count; the ``end`` line, the sentinel, must carry
the number of cases and follow a line for each. The harness gets ``wall_s`` less a margin
as its own budget, so it reports the cases it ran (the rest as timeouts) before the
sandbox kills it at ``wall_s``.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from grouprl.rewards.code.tests_format import ProblemTests

if TYPE_CHECKING:
    from grouprl.sandbox.program import ProgramLimits, ProgramResult

HARNESS_FILE = Path(__file__).with_name("harness.py")
CHILD_FILE = Path(__file__).with_name("harness_child.py")
PYTEST_SHIM = Path(__file__).with_name("pytest_shim.py")
"""pytest's ``raises``, ``approx``, ``mark.parametrize``..., as ``pytest.py`` in the sandbox."""


@dataclass(frozen=True)
class CaseResult:
    status: str
    """``passed``, ``failed`` (wrong output), ``error`` (raised, exited non-zero, did not
    compile), ``timeout``, ``memory``, ``output_limit``, ``skipped`` (after a test not
    passed, without partial credit); ``tests_error``: the tests
    themselves could not load (a module the sandbox lacks)."""
    detail: str = ""


@dataclass(frozen=True)
class HarnessRun:
    """What one sandboxed run of a problem's tests showed."""

    program: ProgramResult
    total: int
    """The problem's number of tests."""
    ready: bool = False
    """The harness started and read its job (the nonce's first line)."""
    cases: list[CaseResult] = field(default_factory=list)
    """Each test's result in order, as far as the harness reported them."""
    complete: bool = False
    """The sentinel came: a result for every test, then ``end`` with the nonce."""
    error: str = ""
    """The harness's own error (a bug or a broken sandbox, not the program's doing)."""


@cache
def source(path: Path) -> str:
    return path.read_text()


def run_tests(
    code: str, tests: ProblemTests, *, limits: ProgramLimits, case_s: float, stop_early: bool
) -> HarnessRun:
    """Runs ``code`` against all of ``tests`` in one sandboxed run within ``limits``;
    each test within ``case_s`` seconds. ``stop_early``: the tests after the first one
    not passed are skipped (all or nothing needs no more)."""
    from grouprl.sandbox.program import PYTHON, run_program  # the sandbox loads on first use

    nonce = secrets.token_hex(16)
    job = {
        "nonce": nonce,
        "mode": tests.kind,
        "cases": list(tests.cases),
        "fn_name": tests.fn_name,
        "test_code": tests.test_code,
        "budget_s": budget_s(limits.wall_s),
        "case_s": case_s,
        "stop_early": stop_early,
        "output_bytes": min(limits.file_mb << 20, 64 << 20),
    }
    files = {
        "harness.py": source(HARNESS_FILE),
        "child.py": source(CHILD_FILE),
        "solution.py": code,
    }
    if tests.kind == "assert":  # the sandbox's interpreter has the standard library only
        files["pytest.py"] = source(PYTEST_SHIM)
    result = run_program(
        [PYTHON, "-S", "harness.py"],  # no site: the harness needs the standard library only
        files=files,
        stdin=json.dumps(job).encode(),
        limits=limits,
    )
    return parse_report(result, nonce=nonce, total=len(tests.cases))


def budget_s(wall_s: float) -> float:
    """The harness's own time budget: ``wall_s`` less a margin (a quarter, at most 1 s)
    for its start and its report."""
    return wall_s - min(1.0, wall_s / 4)


def parse_report(result: ProgramResult, *, nonce: str, total: int) -> HarnessRun:
    """The harness's report in ``result.stdout``: only lines that start with ``nonce``."""
    ready, cases, complete, error = False, [], False, ""
    prefix = f"{nonce} "
    for raw in result.stdout.decode("utf-8", errors="replace").splitlines():
        if not raw.startswith(prefix):
            continue
        kind, _, payload = raw[len(prefix) :].partition(" ")
        try:
            value = json.loads(payload)
        except ValueError:  # cut off at the sandbox's output limit
            continue
        if kind == "ready":
            ready = value == total
        elif kind == "case" and ready and not complete and value.get("i") == len(cases):
            cases.append(CaseResult(value["status"], value.get("detail", "")))
        elif kind == "end" and ready:
            complete = value == total == len(cases)
        elif kind == "error":
            error = value
    return HarnessRun(result, total, ready, cases, complete, error)
