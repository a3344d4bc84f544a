"""Built-in task: GSM8K-style arithmetic word problems, generated from a seed.

Each problem is a short story with two or three operations on small whole
numbers (four or five in ``builtin:arith-long``, ``arith_long.py``). The reference
answer is a worked solution, one equation per step, closed by GSM8K's answer line
``#### N``::

    question: Mia has 7 shells. She finds 5 more shells. Then she gives 3 shells
              to Leo. How many shells does Mia have now?
    answer:   7 + 5 = 12. 12 - 3 = 9.
              #### 9

The train and held-out splits come from disjoint seeds and a held-out
problem never appears in the train split (checked by text), so the splits
are fixed across machines and Python versions (only ``random.Random`` is used).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from grouprl.assets.datasets import fixed_split

NAMES = ("Mia", "Leo", "Ava", "Sam", "Zoe", "Max", "Ivy", "Ben", "Eli", "Ada", "Tom", "Kim")
ITEMS = ("apples", "shells", "stickers", "marbles", "coins", "pens", "cards", "books", "stamps")
PRONOUN = {
    "Mia": "She",
    "Ava": "She",
    "Zoe": "She",
    "Ivy": "She",
    "Ada": "She",
    "Kim": "She",
    "Leo": "He",
    "Sam": "He",
    "Max": "He",
    "Ben": "He",
    "Eli": "He",
    "Tom": "He",
}

SPLIT_SEEDS = {"train": 1_000, "test": 2_000}
SPLIT_SIZES = {"train": 20_000, "test": 500}


@dataclass(frozen=True)
class ArithProblem:
    question: str
    answer: str  # worked solution ending in "#### N"
    target: int


def _step(rng: random.Random, value: int, who: str, other: str, item: str) -> tuple[str, str, int]:
    """One story sentence, its equation and the new running value."""
    she = PRONOUN[who]
    kind = rng.choice(("add", "add", "sub", "sub", "mul"))
    if kind == "mul" and value <= 12:
        k = rng.randint(2, 3)
        word = {2: "doubles", 3: "triples"}[k]
        return f"{she} {word} the number of {item}.", f"{value} * {k} = {value * k}", value * k
    if kind == "sub" and value >= 2:
        k = rng.randint(1, min(value - 1, 9))
        text = rng.choice((f"{she} gives {k} {item} to {other}.", f"{she} loses {k} {item}."))
        return text, f"{value} - {k} = {value - k}", value - k
    k = rng.randint(2, 9)
    text = rng.choice((f"{she} finds {k} more {item}.", f"{other} gives {who} {k} more {item}."))
    return text, f"{value} + {k} = {value + k}", value + k


def make_problem(rng: random.Random, *, steps: tuple[int, int] = (2, 3)) -> ArithProblem:
    """A problem of ``steps`` operations (between the two, inclusive)."""
    who, other = rng.sample(NAMES, 2)
    item = rng.choice(ITEMS)
    value = rng.randint(2, 15)
    sentences = [f"{who} has {value} {item}."]
    equations = []
    for i in range(rng.randint(*steps)):
        text, equation, value = _step(rng, value, who, other, item)
        if i:
            text = "Then " + (
                text[0].lower() + text[1:] if text.startswith(("She", "He")) else text
            )
        sentences.append(text)
        equations.append(equation)
    sentences.append(f"How many {item} does {who} have now?")
    answer = ". ".join(equations) + f".\n#### {value}"
    return ArithProblem(question=" ".join(sentences), answer=answer, target=value)


def arith_split(split: str, *, size: int | None = None) -> list[ArithProblem]:
    """The fixed ``train`` or ``test`` split (first ``size`` problems)."""
    return fixed_split(
        "arith", split, make_problem, seeds=SPLIT_SEEDS, sizes=SPLIT_SIZES, size=size
    )


def builtin_rows(split: str, size: int | None) -> tuple[list[dict[str, str]], list[str]]:
    """Rows for ``builtin:arith``: ``question`` and ``answer`` (worked steps, ``#### N``)."""
    wanted = SPLIT_SIZES[split] if size is None else min(size, SPLIT_SIZES[split])
    return problem_rows(arith_split(split, size=wanted))


def problem_rows(problems: list[ArithProblem]) -> tuple[list[dict[str, str]], list[str]]:
    """The rows of ``problems`` (``question`` and ``answer``) and their column names."""
    return [{"question": p.question, "answer": p.answer} for p in problems], ["answer", "question"]
