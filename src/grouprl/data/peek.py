"""A data source checked without loading it, for ``grouprl plan`` and the start of a run.

``source_problems`` reads only what answers "will this load?": that a local file
exists and parses, and that it has the ``data.prompt_key`` and ``data.answer_key``
columns (dotted keys through nested objects and parquet struct columns)::

    builtin:NAME      one generated row's columns (an unknown name or split is
                      config/checks.py's to report)
    rows.parquet      the schema only, no rows
    rows.jsonl        the first PEEK_ROWS lines
    rows.json         the whole file (JSON cannot be read in part)
    a directory       that it exists; columns from `datasets`' dataset_info.json if any
    owner/name        nothing: a hub dataset cannot be checked offline
    [a, b, ...]       each file as above, and that they have the same columns

It imports neither ``datasets`` nor torch, and pyarrow only for a parquet file. Each
problem names the config key, the value, what the source has, and the fix.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any

from grouprl.assets.datasets import BUILTIN_DATASETS, builtin_rows, split_sizes
from grouprl.config.model_data import DATA_FILE_SUFFIXES, DataConfig, DataSource
from grouprl.data.prompts import PLACEHOLDER
from grouprl.data.sources import get_field, unlike_columns

PEEK_ROWS = 100
LIST = "list"
"""Marks a column whose values are lists (chat messages, for a prompt column)."""

Columns = dict[str, Any]
"""Column name -> nested columns (a dict) for an object or struct column, ``LIST`` for a
list column, else None."""


class _Unreadable(Exception):
    """The source cannot be read as its name says; the message says why."""


def source_problems(
    source: DataSource,
    *,
    config_key: str,
    data: DataConfig,
    missing_ok: bool = False,
    answer_fields: tuple[str, ...] = (),
) -> list[str]:
    """Why ``source`` (at ``config_key``) would fail to load, as messages; [] when it looks
    loadable or cannot be checked here. ``missing_ok``: a path that does not exist here is
    not a problem (``grouprl submit``: it may exist on the cluster). ``answer_fields``:
    columns that stand in for ``data.answer_key`` (``sources.load_rows``)."""
    where = f"{config_key}.source={source.label!r}"
    if isinstance(source.source, str):
        try:
            columns = _peek(source, missing_ok=missing_ok)
        except _Unreadable as err:
            return [f"{where}{err}"]
    else:
        columns, problems = _peek_files(source, config_key=config_key, missing_ok=missing_ok)
        if problems:
            return problems
    if columns is None:
        return []
    keys = [("data.prompt_key", data.prompt_key)]
    if not any(f in columns for f in answer_fields):
        keys.append(("data.answer_key", data.answer_key))
    taken = {data.prompt_key, data.answer_key}
    problems = [
        problem
        for setting, key in keys
        if (
            problem := _column_problem(
                key, columns=columns, setting=setting, where=where, taken=taken
            )
        )
    ]
    if data.prompt_template != PLACEHOLDER and get_field(columns, data.prompt_key) == LIST:
        problems.append(
            f"data.prompt_template={data.prompt_template!r} rewrites text prompts, but "
            f"{where} holds chat messages in data.prompt_key={data.prompt_key!r}, which go to "
            "the chat template as given; put the instruction into the messages (or "
            f"data.system_prompt), or set data.prompt_template={PLACEHOLDER!r} (the default)."
        )
    return problems


def source_columns(source: DataSource, *, missing_ok: bool = False) -> Columns | None:
    """The columns of ``source`` as ``source_problems`` reads them (a list of files: the
    first's), or None where they cannot be known here or it would not load (then
    ``source_problems`` says why)."""
    try:
        if isinstance(source.source, str):
            return _peek(source, missing_ok=missing_ok)
        columns, problems = _peek_files(source, config_key="", missing_ok=missing_ok)
    except _Unreadable:
        return None
    return None if problems else columns


def _peek_files(
    source: DataSource, *, config_key: str, missing_ok: bool
) -> tuple[Columns | None, list[str]]:
    """A list of files: the first file's columns (None if one cannot be checked here),
    and what is wrong: a file that would not load, or files whose columns differ."""
    found: list[tuple[str, Columns | None]] = []
    problems = []
    for i, name in enumerate(source.files):
        try:
            found.append(
                (name, _peek(source.model_copy(update={"source": name}), missing_ok=missing_ok))
            )
        except _Unreadable as err:
            problems.append(f"{config_key}.source file {i} ({name!r}){err}")
    known = [(name, columns) for name, columns in found if columns is not None]
    if problems or not known:
        return None, problems
    first, expected = known[0]
    for name, columns in known[1:]:
        if set(columns) != set(expected):
            problems.append(
                unlike_columns(
                    config_key, name=name, columns=columns, first=first, expected=expected
                )
            )
    return (expected if len(known) == len(found) else None), problems


def _peek(source: DataSource, *, missing_ok: bool) -> Columns | None:
    """The columns of ``source`` (one source: ``_peek_files`` splits a list); None when
    they cannot be known here."""
    name = source.source
    assert isinstance(name, str)
    if name.startswith("builtin:"):
        if name not in BUILTIN_DATASETS or source.split not in split_sizes(name):
            return None
        rows, _ = builtin_rows(name, split=source.split, size=1)
        return _columns_of(rows)
    path = Path(name).expanduser()
    if path.suffix in DATA_FILE_SUFFIXES:
        if path.is_file():
            return _file_columns(path)
        if missing_ok:
            return None
        raise _Unreadable(
            f": file not found (looked in {path.resolve()}). Check the path; relative "
            "paths start at the directory you run from."
        )
    if path.is_dir():
        return _dir_columns(path, split=source.split)
    if name.startswith((".", "/", "~")) and not missing_ok:
        raise _Unreadable(": no such file or directory.")
    return None  # a hub dataset


def _file_columns(path: Path) -> Columns:
    if path.suffix == ".parquet":
        return _parquet_columns(path)
    if path.suffix == ".jsonl":
        return _columns_of(_first_jsonl_rows(path))
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise _Unreadable(f" is not valid JSON: {err}.") from err
    if not isinstance(rows, list):
        raise _Unreadable(
            f" holds a JSON {type(rows).__name__}; expected a list of objects (or one "
            "object per line in a .jsonl file)."
        )
    return _columns_of(rows)


def _first_jsonl_rows(path: Path) -> list[Any]:
    rows: list[Any] = []
    with path.open(encoding="utf-8", errors="replace") as lines:
        for line in lines:
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                rows.append(None)  # a broken row: reported when the data loads
            if len(rows) >= PEEK_ROWS:
                break
    if not any(isinstance(r, dict) for r in rows):
        raise _Unreadable(f" is not JSON lines: none of its first {len(rows)} lines is an object.")
    return rows


def _parquet_columns(path: Path) -> Columns:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
    except Exception as err:  # pyarrow raises several types for a bad file
        raise _Unreadable(f" is not a readable parquet file: {err}.") from err

    def nested(kind: Any) -> Columns | str | None:
        if pa.types.is_struct(kind):
            return {kind.field(i).name: nested(kind.field(i).type) for i in range(kind.num_fields)}
        if pa.types.is_list(kind) or pa.types.is_large_list(kind):
            return LIST
        return None

    return {field.name: nested(field.type) for field in schema}


def _dir_columns(path: Path, *, split: str) -> Columns | None:
    """Top-level columns of a ``save_to_disk`` directory (one split, or a DatasetDict's)."""
    for info in (path / "dataset_info.json", path / split / "dataset_info.json"):
        if info.is_file():
            features = json.loads(info.read_text(encoding="utf-8")).get("features")
            if isinstance(features, dict):
                return dict.fromkeys(features)
    return None


def _columns_of(rows: list[Any]) -> Columns:
    """Union of the rows' keys, nested for object values (``LIST`` if any row has a list)."""
    columns: Columns = {}
    for row in rows:
        if not isinstance(row, dict):
            continue
        for key, value in row.items():
            if isinstance(value, dict):
                inner = columns.get(key)
                inner = inner if isinstance(inner, dict) else {}
                columns[key] = {**inner, **_columns_of([value])}
            elif isinstance(value, list):
                columns[key] = LIST
            else:
                columns.setdefault(key, None)
    return columns


ROLE_NAMES = {
    "data.prompt_key": ("prompt", "question", "problem", "messages", "query", "instruction"),
    "data.answer_key": ("answer", "solution", "ground_truth", "reference", "target", "label"),
}
"""The columns that usually hold each role, in order of preference (GSM8K, MATH, TRL's
and verl's sets), for the hint: a prompt column is never the answer key's suggestion."""


def _hint_column(
    part: str, *, choices: list[str], setting: str, taken: frozenset[str] | set[str]
) -> str | None:
    """The column to suggest for ``setting``: the first present column named for its role,
    else the closest name that is neither the other key's column nor named for its role."""
    free = [c for c in choices if c not in taken]
    for name in ROLE_NAMES.get(setting, ()):
        if name in free:
            return name
    others = {n for role, names in ROLE_NAMES.items() if role != setting for n in names}
    close = difflib.get_close_matches(part, [c for c in free if c not in others], n=1)
    return close[0] if close else None


def _column_problem(
    key: str,
    *,
    columns: Columns,
    setting: str,
    where: str,
    taken: frozenset[str] | set[str] = frozenset(),
) -> str | None:
    """Why ``key`` (literal, else dotted through nested columns) is not in ``columns``;
    ``taken``: the columns the data keys name (never suggested for the other key)."""
    if key in columns:
        return None
    level: object = columns
    walked: list[str] = []
    for part in key.split("."):
        if not isinstance(level, dict):  # not an object column: leave it to the load
            return None
        if part not in level:
            inside = f" column {'.'.join(walked)!r} has the fields" if walked else " columns are"
            choices = sorted(level)
            close = _hint_column(part, choices=choices, setting=setting, taken=taken)
            hint = f"Did you mean {setting}={'.'.join([*walked, close])}? " if close else ""
            return (
                f"{setting}={key!r} is not a column of {where}: its{inside} {choices}. "
                f"{hint}Set {setting} to one of them; a dotted key reads into nested objects."
            )
        walked.append(part)
        level = level[part]
    return None
