"""What a name of user code in the config says: ``package.module:attr`` or
``path/to/file.py:attr`` (an import path), or else a registered name.

Reward functions (``reward.functions``), environments (``env.name``) and agents
(``env.agent``) are named this way; ``sandbox/user_code.py`` resolves and loads them.
These two read the name only (torch-free, nothing imported).
"""

from __future__ import annotations

from pathlib import Path


def is_import_path(name: str) -> bool:
    """Whether ``name`` reads as ``module:attr`` or ``file.py:attr`` (not a registered name)."""
    return ":" in name


def absolute_import_path(name: str) -> str:
    """``name`` with a file path made absolute (another process, or a later ``cd``, finds it)."""
    target, _, attr = name.rpartition(":")
    if not target.endswith(".py"):
        return name
    return f"{Path(target).expanduser().resolve()}:{attr}"
