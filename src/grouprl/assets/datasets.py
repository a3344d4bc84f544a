"""Built-in datasets by name (`builtin:arith`, ...): generated, with fixed splits, nothing
to download; shipped like the built-in models.

Standard library only (the config checks import it without torch). Each
dataset module has ``SPLIT_SIZES`` and ``builtin_rows(split, size)``.
"""

from __future__ import annotations

import importlib
import random
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any, Protocol, TypeVar

BUILTIN_DATASETS = {
    "builtin:arith": "grouprl.assets.arith",  # arithmetic word problems, GSM8K-style answers
    "builtin:arith-long": "grouprl.assets.arith_long",  # the same with 4-5 operations
    "builtin:fictional": "grouprl.assets.fictional",  # questions about a fictional encyclopedia
    "builtin:code": "grouprl.assets.code",  # small programs with tests (code_tests)
}


def _module(name: str) -> ModuleType:
    return importlib.import_module(BUILTIN_DATASETS[name])


def split_sizes(name: str) -> dict[str, int]:
    """Rows per split of the built-in dataset ``name``."""
    return dict(_module(name).SPLIT_SIZES)


def builtin_rows(
    name: str, *, split: str, size: int | None
) -> tuple[list[dict[str, Any]], list[str]]:
    """The first ``size`` rows (all when None) of a split, and the column names."""
    return _module(name).builtin_rows(split, size)


class _Problem(Protocol):
    @property
    def question(self) -> str: ...


P = TypeVar("P", bound=_Problem)


def fixed_split(
    name: str,
    split: str,
    make: Callable[[random.Random], P],
    *,
    seeds: Mapping[str, int],
    sizes: Mapping[str, int],
    size: int | None,
) -> list[P]:
    """The first ``size`` problems (all when None) of a generated dataset's fixed split:
    ``make`` called on ``random.Random(seeds[split])`` until there are enough, the train
    split leaving out every question of the test split (so the same on every machine)."""
    if split not in seeds:
        raise ValueError(f"{name} split {split!r} does not exist; choose one of {list(seeds)}")
    wanted = sizes[split] if size is None else size
    held_out = set()
    if split == "train":
        test = fixed_split(name, "test", make, seeds=seeds, sizes=sizes, size=None)
        held_out = {p.question for p in test}
    rng = random.Random(seeds[split])
    problems: list[P] = []
    while len(problems) < wanted:
        problem = make(rng)
        if problem.question not in held_out:
            problems.append(problem)
    return problems
