"""An asynchronous run's training rows must fit its JSON checkpoints: converted or refused
as the data loads (``data/row_values.py``), not at the first checkpoint."""

from __future__ import annotations

import datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from grouprl.config.model_data import DataSource
from grouprl.data.row_values import RowValueError, json_row
from grouprl.data.sources import DataError, load_rows
from grouprl.types import Completion, Trajectory, Turn, trajectory_from_dict, trajectory_to_dict

WHEN = datetime.datetime(2024, 5, 1, 12, 30)


def _parquet(path: Path, **columns) -> str:
    table = pa.table({"prompt": ["1+1", "2+2", "3+3"], "answer": ["2", "4", "6"], **columns})
    pq.write_table(table, path)
    return str(path)


def _load(source, *, max_staleness: int) -> list[dict]:
    return load_rows(
        DataSource(source=source),
        prompt_key="prompt",
        answer_key="answer",
        max_staleness=max_staleness,
    )


def test_a_timestamp_column_fails_the_load_of_an_async_run_naming_row_column_and_fix(tmp_path):
    path = _parquet(tmp_path / "rows.parquet", created=pa.array([None, WHEN, WHEN]))
    with pytest.raises(DataError) as err:
        _load(path, max_staleness=2)
    message = str(err.value)
    for part in (
        f"data.train.source={path!r} row 1",  # row 0's None is fine
        "column 'created'",
        "datetime.datetime",
        "rollout.max_staleness=2",
        "drop the column or convert it",
        "rollout.max_staleness=0",
    ):
        assert part in message, message
    # a synchronous run checkpoints no rows: the column loads as it is
    assert _load(path, max_staleness=0)[1]["created"] == WHEN


def test_bytes_inside_a_struct_of_a_list_of_files_names_the_file_and_the_place(tmp_path):
    good = _parquet(tmp_path / "a.parquet", meta=[{"blob": "x"}] * 3)
    bad = _parquet(tmp_path / "b.parquet", meta=[{"blob": None}, {"blob": b"\x00"}, {"blob": None}])
    with pytest.raises(DataError) as err:
        _load([good, bad], max_staleness=1)
    message = str(err.value)
    assert f"file {bad!r} row 1, column 'meta' at meta['blob'] holds a builtins.bytes" in message


def test_numpy_values_and_tuples_convert_to_what_the_checkpoint_gives_back():
    row = {
        "prompt": np.str_("1+1"),
        "n": np.int64(3),
        "ok": np.bool_(True),
        "scores": np.array([[0.5, 1.5], [2.0, 3.0]], dtype=np.float32),
        "pair": (1, "a", np.float64(0.25)),
        "meta": {"k": [np.int8(2), (3,)]},
    }
    converted = json_row(row)
    assert converted == {
        "prompt": "1+1",
        "n": 3,
        "ok": True,
        "scores": [[0.5, 1.5], [2.0, 3.0]],
        "pair": [1, "a", 0.25],
        "meta": {"k": [2, [3]]},
    }
    assert type(converted["n"]) is int and type(converted["prompt"]) is str
    # what the stream's checkpoint writes and reads back is the converted row, exactly
    t = Trajectory(
        prompt_index=0,
        prompt_ids=[1],
        turns=[Turn(Completion([2], [-0.1], "stop", text="2"))],
        weight_version=0,
        row=converted,
    )
    assert trajectory_from_dict(trajectory_to_dict(t)).row == converted


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (np.datetime64("2024-05-01T12:30:00.123456789"), "holds a numpy datetime64[ns]"),
        ({1: "a"}, "has the key 1"),
        ({"$float": 1.0}, "has the key '$float'"),
        ({1, 2}, "holds a builtins.set"),
    ],
)
def test_values_with_no_exact_json_form_are_refused(value, why):
    with pytest.raises(RowValueError) as err:
        json_row({"prompt": "q", "extra": [value]})
    assert (err.value.column, err.value.where) == ("extra", "extra[0]")
    assert err.value.why.startswith(why), err.value.why
