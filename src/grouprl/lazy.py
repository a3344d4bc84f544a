"""Names a package loads on first use (PEP 562), so that importing the package is cheap."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def lazy_getattr(package: str, names: dict[str, str]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package``: ``names[name]`` is the module that defines
    ``name`` (absolute, or relative to ``package`` as ".format"), imported when ``name`` is
    first used; the value then stays in the package's globals."""

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(names[name], package), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
