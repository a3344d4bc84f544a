"""Whether a data set's rows carry tests ``code_tests`` can read, before anything loads.

``code_tests`` reads each row's tests when it scores (``tests_format.load_tests``); a row
without them is a reward failure of every sample of its prompt, found only at step 1's
scoring, after the model and the engine loaded. ``tests_problem`` reads the same rows
with the same reader first (``grouprl plan``, and the start of ``grouprl train``):

    every row read has tests          no problem
    some rows have none               a warning naming them (their samples would be
                                      reward failures: left out of training)
    no row read has tests             a problem: the run would train nothing

Torch-free, and no sandbox: reading tests runs no program.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grouprl.data.sources import MISSING, get_field
from grouprl.rewards.code.reward import CodeTests
from grouprl.rewards.code.tests_format import ROW_FIELDS, TestsError, load_tests
from grouprl.rewards.registry import REWARD_FUNCTIONS

SHOWN = 3
"""Bad rows named in a message."""

FORMATS = (
    "the data.answer_key column, or one of the row fields input_output (APPS, TACO, "
    "PRIME), public_test_cases (LiveCodeBench), verification_info (open-r1), tests "
    "(DeepCoder), test / test_code (HumanEval, KodCode: pytest code), test_list (MBPP "
    "asserts)"
)


def reads_code_tests(functions: Sequence[Any]) -> bool:
    """Whether ``reward.functions`` has ``code_tests`` (by name, or a ``CodeTests``
    instance registered under another name)."""
    return any(
        f.name == "code_tests" or isinstance(REWARD_FUNCTIONS.get(f.name), CodeTests)
        for f in functions
    )


def tests_problem(
    rows: Sequence[dict[str, Any]],
    *,
    config_key: str,
    answer_key: str,
    read: str,
) -> tuple[str | None, str | None]:
    """``(problem, warning)`` about the tests of ``rows`` (module docstring); ``read``
    says which rows these are, for the message (``"all 9 rows"``, ``"the first 1,000
    of its rows"``). Rows are named by ``_index``."""
    bad: dict[str, list[Any]] = {}  # reason -> the rows' _index
    for position, row in enumerate(rows):
        reference = get_field(row, answer_key)
        try:
            load_tests(None if reference is MISSING else reference, row)
        except TestsError as err:
            bad.setdefault(_reason(str(err)), []).append(row.get("_index", position))
    if not bad:
        return None, None
    count = sum(len(indices) for indices in bad.values())
    shown = "; ".join(f"{_rows(indices)}: {why}" for why, indices in list(bad.items())[:SHOWN])
    if len(bad) > SHOWN:
        shown += f"; ... {len(bad) - SHOWN} more reasons"
    if count < len(rows):
        return None, (
            f"{config_key}: {count} of {read} have no tests code_tests reads ({shown}); "
            "their samples would be reward failures, left out of training. Fix those rows, "
            "or drop them from the set (docs/code.md lists the formats)."
        )
    columns = sorted({key for row in rows for key in row if key != "_index"})
    return (
        f"{config_key}: reward code_tests runs each row's tests, but none of {read} has "
        f"tests it reads ({shown}), so every sample would be a reward failure and the run "
        f"would train nothing. The rows' columns: {columns}; data.answer_key="
        f"{answer_key!r}. code_tests reads the tests from {FORMATS}. Fix: set "
        "data.answer_key to the column holding the tests, give the rows one of those "
        "fields, or score this set with another reward (docs/code.md)."
    ), None


def _rows(indices: list[Any]) -> str:
    """``row 3`` or ``rows 0, 1, 2 and 17 more``."""
    if len(indices) == 1:
        return f"row {indices[0]}"
    head = ", ".join(str(i) for i in indices[:SHOWN])
    return f"rows {head}" + (f" and {len(indices) - SHOWN} more" if len(indices) > SHOWN else "")


def _reason(message: str) -> str:
    """``load_tests``' message without its row prefix and its fix (said once, above), so
    rows that fail alike group under one reason."""
    text = message.split(": ", 1)[1] if message.startswith("row ") else message
    text = text.split(" Fix:", 1)[0].split(". Fix", 1)[0].rstrip(". ")
    if text.startswith("no tests found"):  # the value and the fields are said once, below
        return "no tests found (data.answer_key's value holds none, and no test field)"
    return text


__all__ = ["FORMATS", "ROW_FIELDS", "reads_code_tests", "tests_problem"]
