"""Built-in task: small programming problems with tests, generated from a seed.

Two kinds of problem, half of each:

- ``print``: an arithmetic story (``arith.make_problem``) whose program must print the
  answer, computed as one Python expression; one stdin/stdout test (empty input)::

      question: Write a Python program that prints the answer.
                Mia has 7 shells. She finds 5 more shells. Then she doubles the number
                of shells. How many shells does Mia have now?
      solution: ```python
                print((7 + 5) * 2)
                ```

- ``function``: a small list or string function from one of ``TEMPLATES``, its constant,
  function and argument names drawn at random; function-call tests (``fn_name``), five
  cases whose expected values are the canonical function's on generated inputs::

      question: Write a Python function `count(nums)` that returns how many numbers in
                nums are greater than 7.
      solution: ```python
                def count(nums):
                    return sum(1 for x in nums if x > 7)
                ```

Each template also has a near miss (``>=`` for ``>``, an index off by one, a slice on the
wrong side), the kind of bug the shipped ``tiny-code`` model was warmed up to make often
(``scripts/make_tiny_code_model.py``); the inputs are drawn until the near miss fails at
least one case, so the tests tell the two apart.

Rows carry the tests as APPS/PRIME ``input_output`` JSON (``{"inputs", "outputs",
"fn_name"}``; call arguments and values as JSON lines), which the ``code_tests`` reward
reads (docs/code.md). The train and held-out splits come from disjoint seeds and a
held-out question never appears in the train split (checked by text); only
``random.Random`` is used, so the splits are the same on every machine.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from grouprl.assets.arith import make_problem
from grouprl.assets.datasets import fixed_split

SPLIT_SEEDS = {"train": 3_000, "test": 4_000}
SPLIT_SIZES = {"train": 20_000, "test": 500}
CASES = 5
"""Function-call tests per function problem."""

FN_NAMES = ("solve", "f", "compute", "answer", "result", "go")
LIST_ARGS = ("xs", "nums", "values", "items")
TEXT_ARGS = ("s", "text", "word", "w")
PRINT_PROMPT = "Write a Python program that prints the answer.\n"


@dataclass(frozen=True)
class CodeProblem:
    question: str
    solution: str
    """The canonical program, in a fenced ``python`` block."""
    tests: dict[str, Any]
    """``input_output``: ``{"inputs", "outputs"}``, with ``fn_name`` for function calls."""
    kind: str
    """``print`` or ``function``."""
    topic: str
    """The story's item (``print``) or the template's name (``function``)."""
    near_miss: str
    """A program close to the solution that fails the tests (the warm-up's habit)."""


@dataclass(frozen=True)
class Template:
    """A function problem: its task text and canonical body, with ``{a}`` (the argument)
    and ``{k}`` (the constant) to fill, the near miss's body, both as Python functions of
    ``(arg, k)`` for the expected values, and a draw of one test input."""

    name: str
    task: str
    body: str
    near_body: str
    fn: Callable[[Any, int], Any]
    near_fn: Callable[[Any, int], Any]
    draw: Callable[[random.Random, int], Any]
    ks: tuple[int, int]
    text_arg: bool = False


def _ints(rng: random.Random, k: int, *, length: tuple[int, int] = (3, 7)) -> list[int]:
    """Numbers around ``k`` (``k`` itself often among them, so ``>=`` and ``>`` differ)."""
    xs = [rng.randint(0, 2 * k + 6) for _ in range(rng.randint(*length))]
    if rng.random() < 0.5:
        xs[rng.randrange(len(xs))] = k
    return xs


def _word(rng: random.Random, k: int) -> str:
    return "".join(rng.choice("abcdefghijklmnoprstuvw") for _ in range(rng.randint(k + 1, k + 5)))


def _letters(rng: random.Random, k: int) -> str:
    """A word where the letter ``k`` stands for appears 0-3 times."""
    letter = "aeiou"[k]
    word = list(_word(rng, 3).replace(letter, "x"))
    for _ in range(rng.randint(0, 3)):
        word.insert(rng.randint(0, len(word)), letter)
    return "".join(word)


TEMPLATES = (
    Template(
        name="count_above",
        task="returns how many numbers in {a} are greater than {k}",
        body="return sum(1 for x in {a} if x > {k})",
        near_body="return sum(1 for x in {a} if x >= {k})",
        fn=lambda xs, k: sum(1 for x in xs if x > k),
        near_fn=lambda xs, k: sum(1 for x in xs if x >= k),
        draw=_ints,
        ks=(2, 9),
    ),
    Template(
        name="sum_first",
        task="returns the sum of the first {k} numbers in {a}",
        body="return sum({a}[:{k}])",
        near_body="return sum({a}[1:{k}])",
        fn=lambda xs, k: sum(xs[:k]),
        near_fn=lambda xs, k: sum(xs[1:k]),
        draw=lambda rng, k: _ints(rng, k, length=(k + 1, k + 4)),
        ks=(2, 6),
    ),
    Template(
        name="nth",
        task="returns the number at position {k} of {a}, counting from 1",
        body="return {a}[{k} - 1]",
        near_body="return {a}[{k}]",
        fn=lambda xs, k: xs[k - 1],
        near_fn=lambda xs, k: xs[k] if k < len(xs) else None,
        draw=lambda rng, k: _ints(rng, k, length=(k + 1, k + 4)),
        ks=(1, 6),
    ),
    Template(
        name="sum_divisible",
        task="returns the sum of the numbers in {a} that are divisible by {k}",
        body="return sum(x for x in {a} if x % {k} == 0)",
        near_body="return sum({a})",
        fn=lambda xs, k: sum(x for x in xs if x % k == 0),
        near_fn=lambda xs, k: sum(xs),
        draw=_ints,
        ks=(2, 5),
    ),
    Template(
        name="add_each",
        task="returns a list of the numbers in {a}, each increased by {k}",
        body="return [x + {k} for x in {a}]",
        near_body="return [x + {k} for x in {a}[1:]]",
        fn=lambda xs, k: [x + k for x in xs],
        near_fn=lambda xs, k: [x + k for x in xs[1:]],
        draw=_ints,
        ks=(2, 9),
    ),
    Template(
        name="max_below",
        task="returns the largest number in {a} that is less than {k}",
        body="return max(x for x in {a} if x < {k})",
        near_body="return max(x for x in {a} if x <= {k})",
        fn=lambda xs, k: max(x for x in xs if x < k),
        near_fn=lambda xs, k: max(x for x in xs if x <= k),
        draw=lambda rng, k: [rng.randint(0, k - 1), *_ints(rng, k)],
        ks=(3, 9),
    ),
    Template(
        name="first_chars",
        task="returns the first {k} characters of {a}",
        body="return {a}[:{k}]",
        near_body="return {a}[{k}:]",
        fn=lambda s, k: s[:k],
        near_fn=lambda s, k: s[k:],
        draw=_word,
        ks=(2, 6),
        text_arg=True,
    ),
    Template(
        name="repeat_dash",
        task="returns {a} repeated {k} times, with a dash between the copies",
        body="return '-'.join([{a}] * {k})",
        near_body="return ({a} + '-') * {k}",
        fn=lambda s, k: "-".join([s] * k),
        near_fn=lambda s, k: (s + "-") * k,
        draw=lambda rng, k: _word(rng, 1),
        ks=(2, 4),
        text_arg=True,
    ),
    Template(
        name="count_letter",
        task="returns how many times the letter '{c}' appears in {a}",
        body="return {a}.count('{c}')",
        near_body="return int('{c}' in {a})",
        fn=lambda s, k: s.count("aeiou"[k]),
        near_fn=lambda s, k: int("aeiou"[k] in s),
        draw=_letters,
        ks=(0, 4),
        text_arg=True,
    ),
)
TEMPLATE_NAMES = tuple(t.name for t in TEMPLATES)


def fenced(code: str) -> str:
    return f"```python\n{code}\n```"


def _expression(answer: str) -> tuple[str, str]:
    """The arith worked answer (``7 + 5 = 12. 12 * 2 = 24.``) as one Python expression,
    ``(7 + 5) * 2``, and its first step alone, ``7 + 5``."""
    steps = re.findall(r"(\d+) ([-+*]) (\d+) = \d+", answer)
    first = expr = " ".join(steps[0])
    for _, op, k in steps[1:]:
        expr = f"({expr}) {op} {k}" if op == "*" else f"{expr} {op} {k}"
    return expr, first


def print_problem(rng: random.Random) -> CodeProblem:
    story = make_problem(rng)
    expr, first = _expression(story.answer)
    opening = re.search(r" has \d+ (\w+)\.", story.question)
    if opening is None:  # every arith story opens with "<Name> has <n> <items>."
        raise ValueError(f"an arith story without its opening line: {story.question!r}")
    item = opening.group(1)
    return CodeProblem(
        question=PRINT_PROMPT + story.question,
        solution=fenced(f"print({expr})"),
        tests={"inputs": [""], "outputs": [f"{story.target}\n"]},
        kind="print",
        topic=item,
        near_miss=fenced(f"print({first})"),
    )


def function_problem(rng: random.Random) -> CodeProblem:
    t = rng.choice(TEMPLATES)
    k = rng.randint(*t.ks)
    fn_name = rng.choice(FN_NAMES)
    arg = rng.choice(TEXT_ARGS if t.text_arg else LIST_ARGS)
    fill = {"a": arg, "k": k, "c": "aeiou"[k % 5]}
    while True:  # inputs where the near miss fails at least one case
        inputs = [t.draw(rng, k) for _ in range(CASES)]
        outputs = [t.fn(x, k) for x in inputs]
        if any(t.near_fn(x, k) != y for x, y in zip(inputs, outputs, strict=True)):
            break
    head = f"def {fn_name}({arg}):\n    "
    return CodeProblem(
        question=f"Write a Python function `{fn_name}({arg})` that {t.task.format(**fill)}.",
        solution=fenced(head + t.body.format(**fill)),
        tests={
            "inputs": [json.dumps(x) for x in inputs],
            "outputs": [json.dumps(y) for y in outputs],
            "fn_name": fn_name,
        },
        kind="function",
        topic=t.name,
        near_miss=fenced(head + t.near_body.format(**fill)),
    )


def code_split(split: str, *, size: int | None = None) -> list[CodeProblem]:
    """The fixed ``train`` or ``test`` split (its first ``size`` problems)."""
    return fixed_split("code", split, _problem, seeds=SPLIT_SEEDS, sizes=SPLIT_SIZES, size=size)


def _problem(rng: random.Random) -> CodeProblem:
    """A print or a function problem, half of each."""
    make = print_problem if rng.random() < 0.5 else function_problem
    return make(rng)


COLUMNS = ["input_output", "kind", "question", "solution", "topic"]


def builtin_rows(split: str, size: int | None) -> tuple[list[dict[str, str]], list[str]]:
    """Rows for ``builtin:code``: ``question``, ``input_output`` (the tests, JSON),
    ``solution`` (the canonical program), ``kind`` and ``topic``."""
    wanted = SPLIT_SIZES[split] if size is None else min(size, SPLIT_SIZES[split])
    rows = [
        {
            "question": p.question,
            "input_output": json.dumps(p.tests),
            "solution": p.solution,
            "kind": p.kind,
            "topic": p.topic,
        }
        for p in code_split(split, size=wanted)
    ]
    return rows, COLUMNS
