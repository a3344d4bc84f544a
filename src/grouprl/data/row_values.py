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

FLOAT_TAG = "$float"
"""The key ``types.trajectory_to_dict`` marks a non-finite float with; a row's dict with it
as its only key would read back as a float."""


class RowValueError(ValueError):
    """A row value JSON cannot hold: its ``column``, its place ``where`` (the column, or
    inside it: ``meta['when'][0]``) and ``why``."""

    def __init__(self, column: str, where: str, *, why: str) -> None:
        super().__init__(f"{where} {why}")
        self.column, self.where, self.why = column, where, why


def json_row(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with numpy values and tuples converted; raises ``RowValueError`` naming the
    column (and the place inside it) of the first value that has no exact JSON form."""
    converted = {}
    for key, value in row.items():
        column = key if type(key) is str else repr(key)
        try:
            converted[key] = _json_value(value, where=column)
        except _Refused as err:
            raise RowValueError(column, err.where, why=err.why) from None
    return converted


class _Refused(Exception):
    def __init__(self, where: str, why: str) -> None:
        super().__init__(where, why)
        self.where, self.why = where, why


def _json_value(value: Any, *, where: str) -> Any:
    kind = type(value)
    if value is None or kind in (bool, int, float, str):
        return value
    if kind.__module__ == "numpy" and hasattr(value, "tolist"):
        if value.dtype.kind in "mMV":  # a datetime64's .item() may be an int: not lossless
            raise _Refused(where, f"holds a numpy {value.dtype} value ({value!r:.60})")
        # a bytes_ scalar's .item() is bytes, an object array's items anything: checked
        return _json_value(value.tolist(), where=where)
    if kind in (list, tuple):
        return [_json_value(v, where=f"{where}[{k}]") for k, v in enumerate(value)]
    if kind is dict:
        bad = [k for k in value if type(k) is not str]
        if bad or list(value) == [FLOAT_TAG]:
            key = bad[0] if bad else FLOAT_TAG
            raise _Refused(
                where,
                f"has the key {key!r} (keys must be text, and a lone key {FLOAT_TAG!r} marks "
                "a non-finite float)",
            )
        return {k: _json_value(v, where=f"{where}[{k!r}]") for k, v in value.items()}
    raise _Refused(where, f"holds a {kind.__module__}.{kind.__qualname__} ({value!r:.60})")


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
