"""What the sandbox for generated programs costs: the same small programs run through
``grouprl.sandbox.program.run_program`` (namespaces, limits, watchdog) and through a bare
``subprocess.run`` (each in a fresh temp dir, as the sandbox does), ``--parallel`` at a
time from threads, interleaved rounds in the same run.

    .venv/bin/python benchmarks/sandbox.py [--programs 200] [--parallel 2] [--rounds 3]
    .venv/bin/python benchmarks/sandbox.py --smoke        # seconds: it still runs

Each program is ``print(sum(range(k)))``; both sides check its output. Prints, per side,
the median programs per second over the rounds and the CPU seconds per program (of the
child processes: the interpreter, and for the sandbox its launcher), then, last, the
slowdown: ``sandbox/bare: N.NNx``.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from machine import add_smoke, cpu_model

from grouprl.sandbox.program import PYTHON, isolation, run_program


def bare(k: int) -> bytes:
    """The program in a fresh temp dir, ``subprocess.run`` with a timeout: no isolation."""
    with tempfile.TemporaryDirectory(prefix="bench-bare-") as tmp:
        Path(tmp, "main.py").write_text(f"print(sum(range({k})))\n")
        done = subprocess.run(
            [PYTHON, "main.py"], cwd=tmp, capture_output=True, timeout=10, check=False
        )
    return done.stdout


def sandboxed(k: int) -> bytes:
    result = run_program([PYTHON, "main.py"], files={"main.py": f"print(sum(range({k})))\n"})
    if result.outcome != "exited":
        raise RuntimeError(f"program {k} ended {result.outcome}: {result.detail}")
    return result.stdout


def one_round(run: Callable[[int], bytes], programs: int, parallel: int) -> tuple[float, float]:
    """Programs per second and child CPU seconds per program, over one round."""
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with ThreadPoolExecutor(parallel) as pool:
        outputs = list(pool.map(run, range(programs)))
    took = time.perf_counter() - start
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    for k, out in enumerate(outputs):
        if out != f"{sum(range(k))}\n".encode():
            raise RuntimeError(f"program {k} printed {out!r}")
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    return programs / took, cpu / programs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", type=int, default=200, help="programs per round")
    parser.add_argument("--parallel", type=int, default=2, help="threads running programs")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each side")
    add_smoke(parser, programs=6, parallel=1, rounds=1)
    args = parser.parse_args()
    print(
        f"{cpu_model()}, {args.programs} programs x {args.rounds} rounds, {args.parallel} at once"
    )
    print(f"sandbox: {isolation()['summary']}")
    sandboxed(0)  # the isolation probe, once per process: not counted
    rates: dict[str, list[tuple[float, float]]] = {"bare": [], "sandbox": []}
    for _ in range(args.rounds):
        rates["bare"].append(one_round(bare, args.programs, args.parallel))
        rates["sandbox"].append(one_round(sandboxed, args.programs, args.parallel))
    median = {side: statistics.median(r for r, _ in got) for side, got in rates.items()}
    for side, got in rates.items():
        cpu = statistics.median(c for _, c in got)
        low, high = min(r for r, _ in got), max(r for r, _ in got)
        print(
            f"{side:8s} {median[side]:7.1f} programs/s (rounds {low:.1f}-{high:.1f}), "
            f"{cpu * 1000:.0f} ms CPU each"
        )
    print(f"sandbox/bare: {median['bare'] / median['sandbox']:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
