"""Built-in datasets by name (`builtin:arith`, ...): generated, with fixed splits, nothing
to download; shipped like the built-in models.

Standard library only (the config checks import it without torch). Each
dataset module has ``SPLIT_SIZES`` and ``builtin_rows(split, size)``.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

BUILTIN_DATASETS = {
    "builtin:arith": "grouprl.assets.arith",  # arithmetic word problems, GSM8K-style answers
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
