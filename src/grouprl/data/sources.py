"""Load prompt rows from a data source: the built-in task, local files, or a dataset.

Sources (``DataSource.source``)::

    builtin:arith            generated arithmetic problems (grouprl.assets.arith)
    builtin:arith-long       the same with four or five operations (assets/arith_long.py)
    builtin:fictional        questions about a fictional encyclopedia (grouprl.assets.fictional)
    reasoning_gym:<task>     a reasoning-gym task's generated items (data/reasoning_gym.py)
    path/to/rows.jsonl       one JSON object per line
    path/to/rows.json        a JSON list of objects
    path/to/rows.parquet     a parquet table
    path/to/dir              a directory saved by `datasets` (save_to_disk), or
                             a dataset folder `datasets.load_dataset` can read
    owner/name               a Hugging Face hub dataset (needs the network)
    [a.parquet, b.jsonl]     local files read in order as one table (same columns)

Every returned row is the source's row as a dict plus ``row["_index"]``, its
position in the source (for a list of files, counted across them in order), so a
skipped row or a failing reward can be traced back; a skipped row of a list is
reported with its file and its position in that file. A key with dots
(``answer.value``) reads into nested dicts; see ``get_field``. The prompt column
holds text or chat messages (``data/messages.py``). A broken row (prompt missing,
empty, or neither text nor a valid list of messages; answer missing; a line that is
not a JSON object) is skipped and reported, never
silently dropped; if every row is broken the load fails.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

from grouprl.assets.datasets import BUILTIN_DATASETS, builtin_rows, split_sizes
from grouprl.config.model_data import DATA_FILE_SUFFIXES, REASONING_GYM_PREFIX, DataSource
from grouprl.data.messages import is_messages, message_problem
from grouprl.data.row_values import RowValueError, json_row, refusal

logger = logging.getLogger(__name__)

MISSING = object()
"""Returned by ``get_field`` when a key does not resolve."""


class DataError(ValueError):
    """A data source that cannot be used as configured; the message says how to fix it."""

    user_error = True


@dataclass
class SkippedRow:
    index: int
    """The row's position in its file (in the source, for one source)."""
    reason: str
    file: str | None = None
    """The file it is in, when the source is a list of files."""

    @property
    def where(self) -> str:
        return f"row {self.index}" if self.file is None else f"{self.file} row {self.index}"


@dataclass
class LoadReport:
    """What a load kept and what it skipped (with reasons), for logs and errors."""

    source: str
    total: int = 0
    """Rows read from the source (before `limit`)."""
    kept: int = 0
    limit: int | None = None
    skipped: list[SkippedRow] = field(default_factory=list)
    complete: bool = True
    """False when only the first rows were read (``read_rows``' ``max_rows``)."""

    def summary(self, *, show: int = 5) -> str:
        head = f"{self.source}: kept {self.kept} of {self.total} rows"
        if self.limit is not None:
            head += f" (limit {self.limit})"
        if not self.skipped:
            return head
        shown = "; ".join(f"{s.where}: {s.reason}" for s in self.skipped[:show])
        more = f"; ... {len(self.skipped) - show} more" if len(self.skipped) > show else ""
        return f"{head}, skipped {len(self.skipped)} broken rows ({shown}{more})"


def get_field(row: dict[str, Any], key: str) -> Any:
    """``row[key]``, or for a dotted key the nested value (``answer.value``); else ``MISSING``.

    A literal key that contains dots wins over the nested reading.
    """
    if key in row:
        return row[key]
    value: object = row
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return MISSING
        value = value[part]
    return value


def load_rows(
    source: DataSource,
    *,
    prompt_key: str,
    answer_key: str,
    config_key: str = "data.train",
    max_staleness: int = 0,
    answer_fields: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    """Valid rows of ``source`` (first ``source.limit`` of them); skipped rows are logged.

    ``config_key`` is where ``source`` sits in the run config (``data.train`` or
    ``data.eval``); error messages name it. ``max_staleness`` >= 1: the rows go into an
    asynchronous run's JSON checkpoints (``data/row_values.py``): numpy values and tuples
    are converted, any other value JSON cannot hold raises ``DataError``.
    ``answer_fields``: row fields that stand in for a missing ``answer_key`` value (a
    reward that finds its reference there: ``code_tests``' test fields), so a row with
    one of them is kept without it.
    """
    rows, report = read_rows(
        source,
        prompt_key=prompt_key,
        answer_key=answer_key,
        config_key=config_key,
        max_staleness=max_staleness,
        answer_fields=answer_fields,
    )
    logger.log(logging.WARNING if report.skipped else logging.INFO, "%s", report.summary())
    return rows


def read_rows(
    source: DataSource,
    *,
    prompt_key: str,
    answer_key: str,
    config_key: str = "data.train",
    max_staleness: int = 0,
    answer_fields: tuple[str, ...] = (),
    max_rows: int | None = None,
) -> tuple[list[dict[str, Any]], LoadReport]:
    """Like ``load_rows`` but returns the report instead of logging it.

    ``limit`` keeps the first ``limit`` valid rows, so a few broken rows do not
    shrink an eval set below the size asked for. ``max_rows``: read at most the first
    ``max_rows`` rows of each file (a sample, for the checks before loading;
    ``report.complete`` says whether that was all of them).
    """
    parts = _read_parts(source, config_key=config_key, max_rows=max_rows)
    raw = [item for _, part, _ in parts for item in part]
    columns = parts[0][2]
    report = LoadReport(source=source.label, total=len(raw), limit=source.limit)
    report.complete = max_rows is None or all(len(part) < max_rows for _, part, _ in parts)
    if not raw:
        raise DataError(f"{config_key}.source={source.label!r} has no rows")
    _check_column(
        prompt_key, columns=columns, raw=raw, config_name="data.prompt_key", source=source.label
    )
    if not any(field in columns for field in answer_fields):
        _check_column(
            answer_key, columns=columns, raw=raw, config_name="data.answer_key", source=source.label
        )
    rows: list[dict[str, Any]] = []
    offset = 0
    for file, part, _ in parts:
        place = f"{config_key}.source={source.label!r}" + (f" file {file!r}" if file else "")
        for index, item in enumerate(part):
            if source.limit is not None and len(rows) >= source.limit:
                break
            reason = _row_problem(
                item, prompt_key=prompt_key, answer_key=answer_key, answer_fields=answer_fields
            )
            if reason is not None:
                report.skipped.append(SkippedRow(index=index, reason=reason, file=file))
                continue
            if max_staleness:
                item = _checkpointable(item, staleness=max_staleness, place=place, row=index)
            rows.append({**item, "_index": offset + index})
        offset += len(part)
    report.kept = len(rows)
    if not rows:
        raise DataError(
            f"every row of {config_key}.source={source.label!r} is broken: {report.summary()}. "
            f"Check data.prompt_key={prompt_key!r} and data.answer_key={answer_key!r}"
        )
    return rows, report


def _checkpointable(
    item: dict[str, Any], *, staleness: int, place: str, row: int
) -> dict[str, Any]:
    """``item`` as an asynchronous run checkpoints it (``json_row``), or ``DataError``
    naming ``place`` (the source, and the file of a list) and the ``row``."""
    try:
        return json_row(item)
    except RowValueError as err:
        raise DataError(refusal(err, place=f"{place} row {row}", staleness=staleness)) from None


class _BadLine:
    """A jsonl line that did not parse into an object; kept in place so indices stay true."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _row_problem(
    item: object, *, prompt_key: str, answer_key: str, answer_fields: tuple[str, ...] = ()
) -> str | None:
    if isinstance(item, _BadLine):
        return item.reason
    if not isinstance(item, dict):
        return f"not an object but {type(item).__name__}"
    prompt = get_field(item, prompt_key)
    if (absent := _absent(prompt, what="prompt", key=prompt_key)) is not None:
        return absent
    if is_messages(prompt):
        problem = message_problem(prompt)
        if problem is not None:
            return f"prompt {prompt_key!r} {problem}"
    elif not isinstance(prompt, str):
        return f"prompt {prompt_key!r} is {type(prompt).__name__}, not text or chat messages"
    elif not prompt.strip():
        return f"prompt {prompt_key!r} is empty"
    absent = _absent(get_field(item, answer_key), what="answer", key=answer_key)
    if absent is not None and any(item.get(f) not in (None, "", []) for f in answer_fields):
        return None  # the reward reads its reference from that field
    return absent


def _absent(value: object, *, what: str, key: str) -> str | None:
    """Why a row has no ``what`` under ``key`` (missing, or null), or None."""
    if value is MISSING:
        return f"no {what} ({key!r} missing)"
    if value is None:
        return f"no {what} ({key!r} is null)"
    return None


def _check_column(
    key: str, *, columns: list[str], raw: list[Any], config_name: str, source: str
) -> None:
    """Fail when no row has ``key``: that is a config mistake, not a broken row."""
    if any(isinstance(r, dict) and get_field(r, key) is not MISSING for r in raw):
        return
    if key in columns or key.split(".")[0] in columns:
        return  # present as a column but null everywhere: reported row by row
    raise DataError(
        f"{source!r} has no column {key!r}; its columns are {sorted(columns)}. "
        f"Set {config_name} to one of them (e.g. {config_name}={sorted(columns)[0]!r})"
        if columns
        else f"{source!r} has no column {key!r} (no rows parsed into objects)"
    )


def _read_parts(
    source: DataSource, *, config_key: str, max_rows: int | None = None
) -> list[tuple[str | None, list[Any], list[str]]]:
    """``(file, raw rows, columns)`` of each file of a list of files, in order (file None
    for a single source); every file must have the first one's columns. ``max_rows``: the
    first rows of each file only."""
    if isinstance(source.source, str):
        return [(None, *_read_source(source, config_key=config_key, max_rows=max_rows))]
    parts = []
    for name in source.files:
        raw, columns = _read_source(
            source.model_copy(update={"source": name}), config_key=config_key, max_rows=max_rows
        )
        parts.append((name, raw, columns))
    first, _, expected = parts[0]
    for name, _, columns in parts[1:]:
        if set(columns) != set(expected):
            raise DataError(
                unlike_columns(
                    config_key, name=name, columns=columns, first=first, expected=expected
                )
            )
    return parts


def unlike_columns(
    config_key: str, *, name: str, columns: Iterable[str], first: str, expected: Iterable[str]
) -> str:
    """The message for a list of files whose file ``name`` lacks the first one's columns."""
    columns, expected = set(columns), set(expected)
    return (
        f"{config_key}.source: {name!r} has the columns {sorted(columns)}, but {first!r} has "
        f"{sorted(expected)} (missing: {sorted(expected - columns)}, extra: "
        f"{sorted(columns - expected)}). The files of a list are read as one table and need "
        "the same columns: make them alike, or train on them separately."
    )


def _read_source(
    source: DataSource, *, config_key: str, max_rows: int | None = None
) -> tuple[list[Any], list[str]]:
    """Raw rows (the first ``max_rows``, when set, of a file, a built-in or a reasoning-gym
    task) and their column names (the union of keys for file rows). One source: a list of
    files is read file by file."""
    name = source.source
    assert isinstance(name, str)
    if name.startswith("builtin:"):
        sizes = [n for n in (source.limit, max_rows) if n is not None]
        size = min(sizes) if sizes else None
        return _read_builtin(name, split=source.split, size=size, config_key=config_key)
    if name.startswith(REASONING_GYM_PREFIX):
        from grouprl.data.reasoning_gym import read_task_rows  # the graders extra

        if max_rows is not None and source.size is not None and source.size > max_rows:
            source = source.model_copy(update={"size": max_rows})
        return read_task_rows(source, config_key=config_key)
    path = Path(name).expanduser()
    if path.suffix in DATA_FILE_SUFFIXES:
        if not path.is_file():
            raise DataError(
                f"{config_key}.source={name!r}: file not found (looked in {path.resolve()}). "
                "Check the path; relative paths start at the directory you run from"
            )
        raw = _read_file(path, config_key=config_key, max_rows=max_rows)
        return raw, _columns_of(raw)
    if path.is_dir():
        return _read_local_dataset(path, source=source, config_key=config_key)
    if name.startswith((".", "/", "~")):
        raise DataError(f"{config_key}.source={name!r}: no such file or directory")
    return _read_hub(source, config_key=config_key)


def _read_builtin(
    name: str, *, split: str, size: int | None, config_key: str
) -> tuple[list[Any], list[str]]:
    if name not in BUILTIN_DATASETS:
        raise DataError(
            f"{config_key}.source={name!r} is not a built-in dataset; "
            f"choose one of {list(BUILTIN_DATASETS)}"
        )
    sizes = split_sizes(name)
    if split not in sizes:
        raise DataError(
            f"{config_key}.split={split!r} does not exist for {name}; choose one of {list(sizes)}"
        )
    # Generated rows are never broken, so `limit` can cut generation short.
    return builtin_rows(name, split=split, size=size)


def _read_file(path: Path, *, config_key: str, max_rows: int | None = None) -> list[Any]:
    """The file's rows; ``max_rows``: its first rows (a .json file is parsed whole: JSON
    cannot be read in part)."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            if max_rows is not None:
                batch = next(pq.ParquetFile(path).iter_batches(batch_size=max(max_rows, 1)), None)
                return [] if batch is None else batch.to_pylist()[:max_rows]
            return pq.read_table(path).to_pylist()
        except Exception as err:  # pyarrow raises several types for a bad file
            raise DataError(
                f"{config_key}.source={str(path)!r} is not a readable parquet file: {err}"
            ) from err
    if max_rows is not None and path.suffix == ".jsonl":
        with path.open(encoding="utf-8") as lines:
            numbered = ((n, line) for n, line in enumerate(lines, 1) if line.strip())
            return [_parse_line(line, number=n) for n, line in islice(numbered, max_rows)]
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise DataError(f"{config_key}.source={str(path)!r} is not valid JSON: {err}") from err
        if not isinstance(data, list):
            raise DataError(
                f"{config_key}.source={str(path)!r} holds a JSON {type(data).__name__}; "
                "expected a list of objects (or use one object per line in a .jsonl file)"
            )
        return data if max_rows is None else data[:max_rows]
    return [
        _parse_line(line, number=n) for n, line in enumerate(text.splitlines(), 1) if line.strip()
    ]


def _parse_line(line: str, *, number: int) -> Any:
    try:
        item = json.loads(line)
    except json.JSONDecodeError as err:
        return _BadLine(f"line {number} is not valid JSON ({err.msg})")
    if not isinstance(item, dict):
        return _BadLine(f"line {number} is a JSON {type(item).__name__}, not an object")
    return item


def _columns_of(raw: list[Any]) -> list[str]:
    columns: dict[str, None] = {}
    for item in raw:
        if isinstance(item, dict):
            columns.update(dict.fromkeys(item))
    return list(columns)


def _read_local_dataset(
    path: Path, *, source: DataSource, config_key: str
) -> tuple[list[Any], list[str]]:
    import datasets

    saved = (path / "dataset_dict.json").is_file() or (path / "state.json").is_file()
    try:
        if saved:
            loaded = datasets.load_from_disk(str(path))
        else:
            loaded = datasets.load_dataset(str(path), source.subset, split=source.split)
    except Exception as err:  # datasets raises many types; all mean "cannot read this"
        raise DataError(
            f"{config_key}.source={source.source!r} is a directory `datasets` cannot read: {err}"
        ) from err
    if isinstance(loaded, datasets.DatasetDict):
        if source.split not in loaded:
            raise DataError(
                f"{config_key}.split={source.split!r} is not in {source.source!r}; "
                f"its splits are {list(loaded)}"
            )
        loaded = loaded[source.split]
    return loaded.to_list(), list(loaded.column_names)


def _read_hub(source: DataSource, *, config_key: str) -> tuple[list[Any], list[str]]:
    import datasets

    assert isinstance(source.source, str)  # a hub dataset is a source of its own
    try:
        loaded = datasets.load_dataset(source.source, source.subset, split=source.split)
    except Exception as err:  # network, auth, unknown name/subset/split
        raise DataError(
            f"could not load {config_key}.source={source.source!r} "
            f"(subset={source.subset!r}, split={source.split!r}) from the Hugging Face hub: "
            f"{type(err).__name__}: {err}. Check the name, {config_key}.subset and "
            f"{config_key}.split, or point {config_key}.source at a local "
            ".jsonl/.json/.parquet file or a directory saved with `save_to_disk`"
        ) from err
    return loaded.to_list(), list(loaded.column_names)
