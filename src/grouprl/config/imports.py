"""User code named by the config: ``package.module:attr`` or ``path/to/file.py:attr``.

Reward functions (``reward.functions``) and environments (``env.name``) are named this
way. A file path is relative to where you run; it is loaded once per process under a
module name made from its absolute path, and registered in ``sys.modules`` so pickling
(worker processes) and dataclasses in the file work. Failures raise ``error`` (the
caller's user-error type) with a message that starts with ``KEY=NAME``.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any


def is_import_path(name: str) -> bool:
    """Whether ``name`` reads as ``module:attr`` or ``file.py:attr`` (not a registered name)."""
    return ":" in name


def absolute_import_path(name: str) -> str:
    """``name`` with a file path made absolute (another process, or a later ``cd``, finds it)."""
    target, _, attr = name.rpartition(":")
    if not target.endswith(".py"):
        return name
    return f"{Path(target).expanduser().resolve()}:{attr}"


def absent_here(name: str) -> bool:
    """Whether ``name`` points at a file or a top-level module this machine does not have."""
    target = name.rpartition(":")[0]
    if target.endswith(".py"):
        return not Path(target).expanduser().is_file()
    return importlib.util.find_spec(target.split(".")[0]) is None


def load_attr(name: str, *, key: str, error: type[Exception], kind: str) -> tuple[Any, Any]:
    """``(module, module.attr)`` for ``name = target:attr``; ``kind`` ("reward", "env")
    names the loaded file's module (``grouprl_user_{kind}_...``). Raises ``error`` naming
    ``key`` when the module cannot be imported or run, or has no ``attr``."""
    target, _, attr = name.rpartition(":")
    if not target or not attr:
        raise error(
            f"{key}={name!r} is not an import path; write `package.module:name` or "
            "`path/to/file.py:name`"
        )
    if target.endswith(".py"):
        module = load_file(target, key=key, name=name, error=error, kind=kind)
    else:
        module = import_module(target, key=key, name=name, error=error)
    value = getattr(module, attr, None)
    if value is None:
        public = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        what = "functions" if kind == "reward" else "classes and functions"
        raise error(f"{key}={name!r}: {target} has no {attr!r}; its {what} are {public}")
    return module, value


def import_module(target: str, *, key: str, name: str, error: type[Exception]) -> Any:
    try:
        return importlib.import_module(target)
    except Exception as err:  # ImportError or an error while running the module
        raise error(
            f"{key}={name!r}: cannot import module {target!r} ({type(err).__name__}: {err}). "
            "Install it or add its directory to PYTHONPATH, or use `path/to/file.py:name`"
        ) from err


def load_file(target: str, *, key: str, name: str, error: type[Exception], kind: str) -> Any:
    path = Path(target).expanduser().resolve()
    if not path.is_file():
        raise error(f"{key}={name!r}: file {str(path)!r} does not exist")
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    module_name = f"grouprl_user_{kind}_{path.stem}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise error(f"{key}={name!r}: {str(path)!r} cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # so pickling and dataclasses in the file work
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        del sys.modules[module_name]
        raise error(
            f"{key}={name!r}: running {str(path)!r} failed ({type(err).__name__}: {err})"
        ) from err
    return module
