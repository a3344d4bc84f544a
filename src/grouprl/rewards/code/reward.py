"""The ``code_tests`` reward: a completion's program run against its problem's tests.

::

    completion ──extract_code──► code (none: no_code, 0.0)
    reference, row ──load_tests──► ProblemTests (none readable: a reward failure)
    code, tests ──run_tests──► one sandboxed run ──judge──► Verdict ──► {"score": s,
                                                  │                 "outcome": "timeout"}
                                                  sandbox_error ──► raises: a reward
                                                  failure (reward.on_error), never a 0

``code_tests`` is ``CodeTests()``: all or nothing, the limits below. Other settings come
from the config, ``reward.functions: [{name: code_tests, args: {partial_credit: true,
wall_s: 4}}]`` (a replaced instance, ``rewards/args.py``), or from another registered
instance, ``register_reward("code_partial", CodeTests(partial_credit=True))``.

A call returns the score with the sample's outcome beside it, logged per step as
``reward/code_tests/outcome/<outcome>`` (every outcome in ``categories``, 0 where none);
``CodeTests.score`` is the number alone. A call needs up to ``wall_s`` plus
``CALL_MARGIN_S`` (``call_s``): a ``reward.sandbox.timeout_s`` below that is refused
before the run, since a call killed at that deadline is a reward failure, while a
program stopped at ``wall_s`` scores as ``timeout``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from grouprl.rewards.code.extract import extract_code
from grouprl.rewards.code.judge import OUTCOMES, SandboxFailure, Verdict, judge
from grouprl.rewards.code.run_harness import (
    CHILD_FILE,
    HARNESS_FILE,
    PYTEST_SHIM,
    run_tests,
    source,
)
from grouprl.rewards.code.tests_format import load_tests

REPORT_BYTES = 4 << 20
"""The harness's stdout cap: its report only (a passed test's line is ~40 bytes, another's
~350), never the program's output, which goes to files."""

CALL_MARGIN_S = 2.0
"""Seconds a call may take beyond ``wall_s``: the tests loaded, the sandbox's start and
teardown, the judging (~0.3-0.5 s idle; more on a loaded machine)."""


@dataclass(frozen=True, kw_only=True)
class CodeTests:
    """Scores a completion by running its program against the row's tests in the sandbox
    (``grouprl.sandbox.program``): 1.0 when every test passes, else 0.0, or the fraction
    passed with ``partial_credit``. Callable as a grouprl reward function."""

    partial_credit: bool = False
    """Score the fraction of tests passed instead of all or nothing."""
    wall_s: float = 8.0
    """Wall-clock seconds of the whole run (all tests); past it everything is killed."""
    case_s: float = 4.0
    """Seconds each test may take (a stdin/stdout case: the program's whole run)."""
    cpu_s: float | None = None
    """CPU seconds of the run (None: ``wall_s``)."""
    memory_mb: int = 512
    """Memory of the run's whole process tree."""
    processes: int = 32
    """Processes and threads the run may have (the harness and the program's child count)."""
    file_mb: int = 16
    """Largest file, and the most output a test may print, in MB."""
    bare_code: bool = True
    """A completion without a fenced block is the program when it parses as Python."""

    categories: ClassVar[dict[str, tuple[str, ...]]] = {
        "outcome": tuple(o for o in OUTCOMES if o != "sandbox_error")
    }
    """The outcomes a call returns (``declares.DeclaresCategories``), logged every step;
    a ``sandbox_error`` is no outcome of a call but its failure (``reward/errors``)."""

    def __post_init__(self) -> None:
        names = ("wall_s", "case_s", "memory_mb", "processes", "file_mb")
        sizes = (self.wall_s, self.case_s, self.memory_mb, self.processes, self.file_mb)
        for name, size in zip(names, sizes, strict=True):
            if not size > 0:
                raise ValueError(f"CodeTests({name}={size!r}): must be a positive number")
        if self.processes < 3:
            raise ValueError(
                f"CodeTests(processes={self.processes}): the harness and the program's "
                "process need at least 3; give 8 or more"
            )

    def limits(self) -> Any:
        """The sandbox limits of one run (``ProgramLimits``)."""
        from grouprl.sandbox.program import ProgramLimits

        return ProgramLimits(
            wall_s=self.wall_s,
            cpu_s=self.cpu_s if self.cpu_s is not None else self.wall_s,
            memory_mb=self.memory_mb,
            processes=self.processes,
            file_mb=self.file_mb,
            output_bytes=REPORT_BYTES,
        )

    def call_s(self) -> tuple[float, str]:
        """The most seconds a call takes (``declares.NeedsSeconds``): ``wall_s`` plus
        ``CALL_MARGIN_S``."""
        return self.wall_s + CALL_MARGIN_S, "wall_s"

    def warm_up(self) -> None:
        """Once per reward worker (``declares.WarmsUp``): import the sandbox and read the
        harness's files, outside the first call's deadline."""
        import grouprl.sandbox.program  # noqa: F401  (what run_tests imports at its first call)

        for path in (HARNESS_FILE, CHILD_FILE, PYTEST_SHIM):
            source(path)

    def verdict(self, completion: str, *, reference: object, row: dict[str, Any]) -> Verdict:
        """The sample's outcome: its program against the row's tests (raises
        ``TestsError`` when the row has no tests it can read)."""
        tests = load_tests(reference, row)
        code = extract_code(completion, bare_code=self.bare_code)
        if code is None:
            return Verdict("no_code", total=len(tests.cases), detail="no code in the completion")
        run = run_tests(
            code,
            tests,
            limits=self.limits(),
            case_s=self.case_s,
            stop_early=not self.partial_credit,
        )
        return judge(run)

    def __call__(
        self,
        completion: str,
        *,
        reference: object = None,
        row: dict[str, Any] | None = None,
        **kwargs: object,
    ) -> dict[str, Any]:
        """``{"score", "outcome", "tests_passed"}`` (the outcome's share and the mean
        fraction of tests passed are logged per step); raises
        ``SandboxFailure`` for a ``sandbox_error``: a reward failure, never a 0."""
        verdict = self.verdict(completion, reference=reference, row=row or {})
        if verdict.outcome == "sandbox_error":
            raise SandboxFailure(
                f"{verdict.detail}. Not the program's fault: this sample is a reward "
                "failure, left out of training (reward.on_error), never scored 0"
            )
        return {
            "score": verdict.score(partial_credit=self.partial_credit),
            "outcome": verdict.outcome,
            "tests_passed": verdict.passed / verdict.total if verdict.total else 0.0,
        }

    def score(
        self, completion: str, *, reference: object = None, row: dict[str, Any] | None = None
    ) -> float:
        """The call's score alone (evaluation scripts, tests)."""
        return self(completion, reference=reference, row=row)["score"]


code_tests = CodeTests()
"""The registered ``code_tests`` reward: all or nothing, the default limits."""
