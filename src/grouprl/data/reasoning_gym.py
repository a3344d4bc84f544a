"""reasoning-gym's procedural tasks as a data source, and each item rebuilt at scoring time.

::

    data.train: {source: "reasoning_gym:chain_sum", size: 1000, seed: 0}
         │ read_rows: create_dataset(task, size=, seed=)[i] for i < size
         ▼
    row = {question, answer, reasoning_gym: {task, size, seed, index}}
         │ the sample's row reaches the reward worker (a small dict, no metadata)
         ▼
    entry(row) = create_dataset(task, size=, seed=)[index]  (cached per process)
         │ rewards/reasoning_gym.py: dataset.score_answer(answer, entry)

reasoning-gym 0.1.25 (an optional extra: ``make install``, or ``pip install
'grouprl[graders]'``) builds item ``i`` from its own ``Random(seed + i)``, so an item is
its (task, size, seed, index) and a row carries only those: the entry's metadata (grids,
solutions) never travels. Two sources of one task whose ranges ``[seed, seed + size)``
overlap share items, which the checks refuse for ``data.train`` against ``data.eval``.
"""

from __future__ import annotations

import difflib
import functools
import threading
from typing import Any

from grouprl.config.model_data import REASONING_GYM_PREFIX, DataConfig, DataSource

ROW_KEY = "reasoning_gym"
"""The row's column holding its item's ``{task, size, seed, index}``."""
INSTALL = "make install, or pip install 'grouprl[graders]'"
"""How to install the graders extra (math-verify and reasoning-gym), for messages."""
DEFAULT_SEED = 0
"""The seed of a source that gives none."""
DESCRIPTION_CHARS = 90
"""The longest task description ``grouprl tasks`` prints."""


class TaskError(ValueError):
    """A reasoning-gym source or row that cannot be used; the message says how to fix it."""

    user_error = True


def is_task_source(source: DataSource | None) -> bool:
    """Whether ``source`` names a reasoning-gym task (``reasoning_gym:<task>``)."""
    return (
        source is not None
        and isinstance(source.source, str)
        and source.source.startswith(REASONING_GYM_PREFIX)
    )


def task_names() -> dict[str, str]:
    """reasoning-gym's registered tasks, sorted, each with the first line of its dataset
    class's docstring, cut to ``DESCRIPTION_CHARS`` ("" when it has none). Imports
    reasoning-gym (~1-2 s)."""
    factory = _factory(key="grouprl tasks", value="")
    found = {}
    for name in sorted(factory.DATASETS):
        doc = (factory.DATASETS[name][0].__doc__ or "").strip()
        line = doc.splitlines()[0].strip() if doc else ""
        found[name] = (
            line if len(line) <= DESCRIPTION_CHARS else line[: DESCRIPTION_CHARS - 3] + "..."
        )
    return found


def read_task_rows(source: DataSource, *, config_key: str) -> tuple[list[Any], list[str]]:
    """The rows of ``source`` and their columns: item ``i`` of the task for each ``i`` below
    ``size`` (``sources.load_rows`` adds ``_index`` and applies ``limit``)."""
    task, size, seed = _spec(source, config_key=config_key)
    problem = _task_problem(task, key=f"{config_key}.source", value=str(source.source))
    if problem is not None:
        raise TaskError(problem)
    data = dataset(task, size=size, seed=seed)
    rows = [_row(task, size=size, seed=seed, index=i, entry=_item(data, i)) for i in range(size)]
    return rows, ["question", "answer", ROW_KEY]


def entry(row: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The dataset and the entry a row was made from, rebuilt from its ``reasoning_gym``
    column (``read_task_rows``); the dataset is built once per process."""
    spec = row.get(ROW_KEY)
    if not isinstance(spec, dict) or not {"task", "size", "seed", "index"} <= set(spec):
        raise TaskError(
            f"the row (index {row.get('_index')}) has no {ROW_KEY!r} column with task, size, "
            f"seed and index; the reasoning_gym reward scores rows of a reasoning_gym:<task> "
            f"source (data.train: {{source: reasoning_gym:chain_sum, size: 1000}}) only"
        )
    data = dataset(spec["task"], size=spec["size"], seed=spec["seed"])
    return data, _item(data, spec["index"])


@functools.lru_cache(maxsize=16)
def dataset(task: str, *, size: int, seed: int) -> Any:
    """reasoning-gym's ``create_dataset(task, size=, seed=)``, once per process."""
    factory = _factory(key=REASONING_GYM_PREFIX + task, value="")
    return factory.create_dataset(task, size=size, seed=seed)


_GENERATING = threading.Lock()
"""A few tasks seed numpy's global generator per item (pool_matrix): reward calls in
threads of one worker build their items one at a time."""


def _item(data: Any, index: int) -> dict[str, Any]:
    with _GENERATING:
        return data[index]


def _row(task: str, *, size: int, seed: int, index: int, entry: dict[str, Any]) -> dict:
    answer = entry.get("answer")
    return {
        "question": entry["question"],
        # a few tasks have many right answers and no oracle one (their scorer checks)
        "answer": "" if answer is None else str(answer),
        ROW_KEY: {"task": task, "size": size, "seed": seed, "index": index},
    }


def task_source_problems(data: DataConfig) -> list[str]:
    """Why ``data.train`` or ``data.eval``, as reasoning-gym sources, would not load: the
    extra not installed, an unknown task (with the close names), no ``size``, a task that
    fails to build its first item, or held-out items that are training items. [] when
    neither is a reasoning-gym source."""
    problems = []
    sources = [("data.train", data.train), ("data.eval", data.eval)]
    for key, source in sources:
        if source is None or not is_task_source(source):
            continue
        try:
            task, _, seed = _spec(source, config_key=key)
        except TaskError as err:
            problems.append(str(err))
            continue
        problem = _task_problem(task, key=f"{key}.source", value=str(source.source))
        if problem is None:
            problem = _build_problem(task, seed=seed, key=key)
        if problem is not None:
            problems.append(problem)
    if is_task_source(data.train) and is_task_source(data.eval) and not problems:
        assert data.eval is not None
        problems += _overlap(data.train, data.eval)
    return problems


def _spec(source: DataSource, *, config_key: str) -> tuple[str, int, int]:
    assert isinstance(source.source, str)
    task = source.source.removeprefix(REASONING_GYM_PREFIX)
    if source.size is None:
        raise TaskError(
            f"{config_key}.size is not set: {config_key}.source={source.source!r} generates "
            f"its items, and size says how many. Fix: e.g. {config_key}: {{source: "
            f"{source.source}, size: 1000, seed: 0}}"
        )
    return task, source.size, DEFAULT_SEED if source.seed is None else source.seed


def _task_problem(task: str, *, key: str, value: str) -> str | None:
    """Why ``task`` is not a reasoning-gym task, naming ``key``, ``value`` and close names."""
    try:
        names = list(_factory(key=key, value=value).DATASETS)
    except TaskError as err:
        return str(err)
    if task in names:
        return None
    close = difflib.get_close_matches(task, names, n=3)
    hint = f"Did you mean {', '.join(REASONING_GYM_PREFIX + c for c in close)}? " if close else ""
    return (
        f"{key}={value!r}: {task!r} is not a reasoning-gym task. {hint}`grouprl tasks` "
        f"lists the {len(names)} tasks; write {key}=reasoning_gym:<task>."
    )


def _build_problem(task: str, *, seed: int, key: str) -> str | None:
    """Why the task's first item cannot be built (a task that needs more configuration,
    such as ``composite``), or None."""
    try:
        first = _item(dataset(task, size=1, seed=seed), 0)
    except Exception as err:  # reasoning-gym's tasks raise many types on a bad config
        return (
            f"{key}.source='reasoning_gym:{task}': reasoning-gym could not build its first "
            f"item ({type(err).__name__}: {err}); this task needs a configuration grouprl "
            "does not pass (only size and seed). Choose another task (`grouprl tasks`)."
        )
    if not isinstance(first.get("question"), str):
        return f"{key}.source='reasoning_gym:{task}': its items have no question text."
    return None


def _overlap(train: DataSource, held: DataSource) -> list[str]:
    """The held-out items that are training items: one task, overlapping seed ranges."""
    t_task, t_size, t_seed = _spec(train, config_key="data.train")
    e_task, e_size, e_seed = _spec(held, config_key="data.eval")
    if t_task != e_task or e_seed >= t_seed + t_size or e_seed + e_size <= t_seed:
        return []
    return [
        f"data.eval (reasoning_gym:{e_task}, seed {e_seed}, size {e_size}) shares items with "
        f"data.train (seed {t_seed}, size {t_size}): reasoning-gym builds item i from seed + "
        f"i, so seeds {max(t_seed, e_seed)} to {min(t_seed + t_size, e_seed + e_size) - 1} "
        f"are in both. Fix: data.eval.seed={t_seed + t_size} (or any seed at least "
        f"data.train.seed + data.train.size, or below data.train.seed - data.eval.size)."
    ]


def _factory(*, key: str, value: str) -> Any:
    """``reasoning_gym.factory``, or a ``TaskError`` saying how to install it."""
    try:
        from reasoning_gym import factory
    except ImportError as err:
        where = f"{key}={value!r} needs" if value else f"{key} needs"
        raise TaskError(
            f"{where} reasoning-gym, which is not installed ({err}). Install the graders "
            f"extra: {INSTALL}."
        ) from err
    return factory
