"""grouprl's own keys that moved (``RENAMED``), and the ``Alias`` record that this table and
``config/aliases.py``'s verl and TRL tables share. Imports no torch.

Unlike a verl or TRL key, an old grouprl key still works: the loader and the sections move
it to its new place (``renamed_to_new``) and a hint names the new key.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Alias:
    key: str
    """The key as its framework writes it."""
    framework: str
    """`verl`, `TRL`, or `grouprl` (one of its own keys that moved)."""
    grouprl: tuple[str, ...]
    """The grouprl keys (dotted paths) that set the same thing; empty: no equivalent."""
    note: str = ""
    """Unit changes, value translations, or (with no equivalent) what to do instead."""
    same: bool = False
    """verl: the value means the same at the grouprl key; ``grouprl convert`` copies it."""

    @property
    def leaf(self) -> str:
        return self.key.rpartition(".")[2]


def _g(old: str, new: str, note: str = "") -> Alias:
    return Alias(key=old, framework="grouprl", grouprl=(new,), note=note)


SEARCH = "search_qa's own setting, passed like a class's env.args"

RENAMED: tuple[Alias, ...] = (
    # the containment of user code: one `sandbox` block, for rewards and environments
    _g("reward.workers", "reward.sandbox.workers"),
    _g("reward.memory_mb", "reward.sandbox.memory_mb"),
    _g("reward.timeout_s", "reward.sandbox.timeout_s"),
    _g("env.workers", "env.sandbox.workers"),
    _g("env.memory_mb", "env.sandbox.memory_mb"),
    _g("env.step_timeout_s", "env.sandbox.timeout_s", "each start or step call's deadline"),
    # your own agent: one `agent` block (env.agent=FILE.py:solve still names it alone)
    _g("env.agent_timeout_s", "env.agent.timeout_s", "each episode's deadline"),
    _g("env.agent_concurrency", "env.agent.concurrency"),
    # the built-in search environment's settings
    _g("env.corpus", "env.args.corpus", SEARCH),
    _g("env.search_k", "env.args.k", SEARCH),
    _g("env.turn_reward", "env.args.turn_reward", SEARCH),
    _g("env.tool_timeout_s", "env.args.timeout_s", SEARCH),
    _g("env.tool_max_chars", "env.args.max_chars", SEARCH),
)
"""grouprl keys that moved, each with its new key: the old one still works, with a hint."""
OLD_NAMES = {alias.grouprl[0]: alias.key for alias in RENAMED}
"""A key's old name (``env.sandbox.workers`` -> ``env.workers``), to name both."""


def renamed_to_new(data: dict[str, Any], *, origin: str, prefix: str = "") -> list[str]:
    """Move every old key (``RENAMED``) found in ``data``, the nested mapping of the section
    at ``prefix`` (``""``: the whole run, ``"env."``: the env section), to its new key, in
    place, with a warning (``rename_hint``) for each. Returns a problem for each key set
    under both its old and new name in ``origin`` (the old one is dropped: the new key wins)."""
    problems = []
    for alias in RENAMED:
        if not alias.key.startswith(prefix):
            continue
        *old_parents, old_leaf = alias.key.removeprefix(prefix).split(".")
        parent = _section_at(data, old_parents, create=False)
        if parent is None or old_leaf not in parent:
            continue
        value = parent.pop(old_leaf)
        *new_parents, new_leaf = alias.grouprl[0].removeprefix(prefix).split(".")
        target = _section_at(data, new_parents, create=True)
        if target is None or new_leaf in target:
            problems.append(
                f"{alias.key} and {alias.grouprl[0]} (in {origin}) are the same key under its "
                f"old and new name; remove {alias.key}"
            )
            continue
        target[new_leaf] = value
        logger.warning(rename_hint(alias, origin=origin))
    return problems


def _section_at(data: dict[str, Any], parts: list[str], *, create: bool) -> dict | None:
    """The mapping at ``parts`` inside ``data`` (a section given as a model is dumped to
    one); with ``create``, missing or null sections are made. None: not a mapping."""
    node: dict[str, Any] = data
    for part in parts:
        child = node.get(part)
        if child is None and create:
            child = node[part] = {}
        elif isinstance(child, BaseModel):  # a section given from Python
            child = node[part] = child.model_dump(exclude_unset=True)
        if not isinstance(child, dict):
            return None
        node = child
    return node


def rename_hint(alias: Alias, *, origin: str) -> str:
    """The hint for an old key that still works: where it went."""
    note = f" ({alias.note})" if alias.note else ""
    return (
        f"{alias.key} (in {origin}) is now {alias.grouprl[0]}{note}; the old key still works "
        f"for now: rename it. docs/migration.md lists the renamed keys."
    )
