"""Built-in task ``builtin:arith-long``: the word problems of ``builtin:arith`` with four
or five operations instead of two or three, so answers are twice as long.

The shipped student (``builtin:tiny-arith``) never saw an answer past three steps: it
closes with ``#### N`` after the third equation and answers 8% of these right (greedy,
mostly by coincidence), so a task reward is sparse for it; a teacher fine-tuned on worked
answers (``scripts/make_tiny_long_teacher.py``) answers 95%. ``benchmarks/distill.py
--task long`` runs GRPO and distillation on it. Splits of their own seeds, fixed like
arith's.
"""

from __future__ import annotations

import random

from grouprl.assets.arith import ArithProblem, make_problem, problem_rows
from grouprl.assets.datasets import fixed_split

STEPS = (4, 5)
SPLIT_SEEDS = {"train": 3_000, "test": 4_000}
SPLIT_SIZES = {"train": 20_000, "test": 500}


def make_long_problem(rng: random.Random) -> ArithProblem:
    return make_problem(rng, steps=STEPS)


def arith_long_split(split: str, *, size: int | None = None) -> list[ArithProblem]:
    """The fixed ``train`` or ``test`` split (first ``size`` problems)."""
    return fixed_split(
        "arith-long", split, make_long_problem, seeds=SPLIT_SEEDS, sizes=SPLIT_SIZES, size=size
    )


def builtin_rows(split: str, size: int | None) -> tuple[list[dict[str, str]], list[str]]:
    """Rows for ``builtin:arith-long``: ``question`` and ``answer`` (worked steps, ``#### N``)."""
    wanted = SPLIT_SIZES[split] if size is None else min(size, SPLIT_SIZES[split])
    return problem_rows(arith_long_split(split, size=wanted))
