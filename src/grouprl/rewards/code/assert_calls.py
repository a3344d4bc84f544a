"""MBPP-style assert lines judged as function calls, where that changes no verdict.

Assert-style tests run in the program's own process, so a program can forge them
(docs/code.md). An assert line of the shape ``assert f(<literals>) == <literal>`` needs no
test code at all: it is the function-call test ``f(*args)`` against an expected value,
and a function-call test is judged by the harness's parent, which alone holds the
expected values. ``as_call_tests`` turns a list of such lines into call cases, and only
where the verdict stays what Python's ``==`` would give:

- every line is ``assert NAME(args) == EXPECTED`` (an optional message), one ``NAME``
  for all, positional arguments only, arguments and expected value Python literals;
- they hold only JSON's plain values (None, bools, numbers, strings, lists, dicts with
  string keys): a tuple or a set would arrive as a list, so lines holding one stay
  assert-style;
- the returned value is held to the same plain types in the sandbox (``strict``): a
  tuple returned where the line expects a list fails there as ``==`` fails it.

Anything else (setup code, ``math.isclose``, ``set(f(x))``, a method call) keeps the
whole row assert-style. A value of another numeric type that ``==`` would accept
(``Fraction(1, 2) == 0.5``) fails here: a rare, documented difference.
"""

from __future__ import annotations

import ast
import json
from typing import Any

from grouprl.rewards.code.harness_child import plain

__all__ = ["as_call_tests"]


def as_call_tests(lines: list[str]) -> tuple[str, tuple[dict[str, Any], ...]] | None:
    """The function's name and one call case per line (``{"args", "expected", "wrapped":
    False, "strict": True}``), or None where any line is not of the shape above."""
    name, cases = None, []
    for line in lines:
        call = _call_line(line)
        if call is None or (name is not None and call[0] != name):
            return None
        name = call[0]
        cases.append({"args": call[1], "expected": call[2], "wrapped": False, "strict": True})
    if name is None:
        return None
    return name, tuple(cases)


def _call_line(line: str) -> tuple[str, list[Any], Any] | None:
    """``assert NAME(args) == EXPECTED`` as (NAME, args, EXPECTED), else None."""
    try:
        tree = ast.parse(line.strip())
    except (SyntaxError, ValueError, RecursionError):
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assert):
        return None
    test = tree.body[0].test
    if not (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.Eq)
        and isinstance(test.left, ast.Call)
        and isinstance(test.left.func, ast.Name)
        and not test.left.keywords
        and not any(isinstance(a, ast.Starred) for a in test.left.args)
    ):
        return None
    try:
        args = [ast.literal_eval(a) for a in test.left.args]
        expected = ast.literal_eval(test.comparators[0])
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    if not (plain(args) and plain(expected)):
        return None
    try:
        json.dumps([args, expected])  # (an int past the int-to-text limit: not plain)
    except (ValueError, RecursionError):
        return None
    return test.left.func.id, args, expected
