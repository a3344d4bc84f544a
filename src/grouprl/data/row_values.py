"""Rows as values a JSON checkpoint holds exactly, checked when the rows load.

An asynchronous run (``rollout.max_staleness`` >= 1) checkpoints its buffered groups, rows
included, as JSON (``types.trajectory_to_dict``), which refuses what it cannot give back
exactly. Checked here, a date or bytes column fails as the data loads, before any model
does, not at the first checkpoint after training started::

    numpy scalar          -> its Python number, bool or text (``.item()``)
    numpy array, tuple    -> a list (of converted values)
    None bool int float str, lists, dicts with text keys: kept
    anything else         -> DataError: the file, row, column, type and the fix

A converted value reads back from the checkpoint as the same numbers in a list, which is
what a reward function sees from the start of the run, not only after a resume.
"""

from __future__ import annotations

from typing import Any

from grouprl.types import ValueRefused, json_value


class RowValueError(ValueError):
    """A row value JSON cannot hold: its ``column``, its place ``where`` (the column, or
    inside it: ``meta['when'][0]``) and ``why``."""

    def __init__(self, column: str, where: str, *, why: str) -> None:
        super().__init__(f"{where} {why}")
        self.column, self.where, self.why = column, where, why


def json_row(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with numpy values and tuples converted; raises ``RowValueError`` naming the
    column (and the place inside it) of the first value that has no exact JSON form (the
    walk ``types.trajectory_to_dict`` checks a checkpoint's rows with)."""
    converted = {}
    for key, value in row.items():
        column = key if type(key) is str else repr(key)
        try:
            converted[key] = json_value(value, where=column, convert=_numpy_or_tuple)
        except ValueRefused as err:
            raise RowValueError(column, err.where, why=err.why) from None
    return converted


def _numpy_or_tuple(value: Any, where: str) -> Any:
    """A numpy value's Python form (checked in turn: a bytes_ scalar's is bytes, an object
    array's items anything), a tuple's list; NotImplemented for any other type."""
    if type(value) is tuple:
        return list(value)
    if type(value).__module__ != "numpy" or not hasattr(value, "tolist"):
        return NotImplemented
    if value.dtype.kind in "mMV":  # a datetime64's .item() may be an int: not lossless
        raise ValueRefused(where, f"holds a numpy {value.dtype} value ({value!r:.60})")
    return value.tolist()


def refusal(err: RowValueError, *, place: str, staleness: int) -> str:
    """The message for a row value ``err`` found at ``place`` (the source, file and row)."""
    inside = "" if err.where == err.column else f" at {err.where}"
    return (
        f"{place}, column {err.column!r}{inside} {err.why}: rollout.max_staleness={staleness} "
        "checkpoints the buffered rollouts' rows as JSON, which cannot hold it exactly. "
        "Allowed: None, bool, int, float, text, and lists and dicts (text keys) of them; "
        "numpy values and tuples are converted. Fix: drop the column or convert it to text or "
        "numbers in the dataset (a date as ISO text, bytes as base64), or set "
        "rollout.max_staleness=0, which checkpoints no rows."
    )
