"""Runs ``grouprl`` command lines one after another in one fresh interpreter, as a user's
shell would run them, and reports what each printed, its exit code and its seconds, and
which heavy modules the interpreter had imported by the end (a check that fails early
must come before torch, vLLM, Ray, transformers and datasets load)."""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass

HEAVY = ("torch", "vllm", "ray", "transformers", "datasets")  # datasets alone takes ~1 s


@dataclass
class Outcome:
    stderr: str
    code: str
    seconds: float


def run_cli(argvs: list[list[str]]) -> tuple[list[Outcome], list[str]]:
    """Each ``argv`` through ``grouprl.cli.main`` in turn; (their outcomes, the heavy
    modules imported). Runs in the current directory."""
    probe = (
        "import sys, time\n"
        "from grouprl.cli import main\n"
        f"for argv in {argvs!r}:\n"
        "    sys.argv = argv\n"
        "    print('CASE', flush=True, file=sys.stderr)\n"
        "    started = time.perf_counter()\n"
        "    try:\n"
        "        main()\n"
        "        code = 0\n"
        "    except SystemExit as exit:\n"
        "        code = exit.code or 0\n"
        "    took = time.perf_counter() - started\n"
        "    print('EXIT', code, f'{took:.2f}', flush=True, file=sys.stderr)\n"
        f"print('HEAVY', sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60
    )
    outputs = result.stderr.split("CASE\n")[1:]
    assert len(outputs) == len(argvs), result.stdout + result.stderr
    outcomes = []
    for output in outputs:
        text, _, exit_line = output.rpartition("EXIT ")
        code, seconds = exit_line.split()[:2]
        outcomes.append(Outcome(stderr=text, code=code, seconds=float(seconds)))
    assert "HEAVY " in result.stdout, result.stdout + result.stderr
    return outcomes, ast.literal_eval(result.stdout.split("HEAVY ")[-1].strip())
