"""What a reward object may declare about itself, each a small protocol the scorer and the
checks ask by type, never by the reward's name:

    DeclaresCategories  categories   its str extras' known values, logged every step
                                     (``extras.py``; ``code_tests``: its outcomes)
    NeedsSeconds        call_s()     the seconds one call may take at most, and the
                                     setting that decides them; the config check refuses
                                     a ``reward.sandbox.timeout_s`` below them
                                     (``code_tests``: its ``wall_s`` plus 2 s)
    WarmsUp             warm_up()    work a fresh reward worker does once, before any
                                     call's deadline (an import, files read):
                                     ``calls.preload``, within ``WARM_UP_S``
    DeclaresScope       scope        "group": called once per prompt group whatever the
                                     entry's ``scope`` (``registry.resolve_rewards``;
                                     ``reward_model``: a group is one batch)
    ReadsPrompts        reads_prompts  the scorer passes ``prompts=``, each sample's
                                     prompt as the policy saw it (decoded from the ids
                                     the engine got), to a group call (``reward_model``)
    Learned             learned      a learned signal: the run logs
                                     ``reward/<fn>/agreement`` with
                                     ``reward.correct_function`` (``scores.agreement``)

A reward with ``reward.functions[i].args`` is the object with those args
(``args.with_args``): a replaced dataclass keeps its declarations; a function wrapped in
``functools.partial`` declares nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class DeclaresCategories(Protocol):
    """A reward whose str extras come from a known set: ``{key: (category, ...)}``."""

    categories: Mapping[str, Sequence[str]]


@runtime_checkable
class NeedsSeconds(Protocol):
    """A reward whose call may take up to some seconds by its own settings."""

    def call_s(self) -> tuple[float, str]:
        """The most seconds one call takes, and the name of the setting (a field, an
        ``args`` key) that decides them, e.g. ``(10.0, "wall_s")``."""
        ...


@runtime_checkable
class WarmsUp(Protocol):
    """A reward with work to do once per worker process, outside any call's deadline."""

    def warm_up(self) -> None: ...


@runtime_checkable
class DeclaresScope(Protocol):
    """A reward that is called one way only: ``scope`` is ``"sample"`` or ``"group"``."""

    scope: str


@runtime_checkable
class ReadsPrompts(Protocol):
    """A group reward that reads each sample's rendered prompt (``prompts=``, a list)."""

    reads_prompts: bool


@runtime_checkable
class Learned(Protocol):
    """A learned reward (a model's judgement), whose agreement with the checker is logged."""

    learned: bool


def declared_categories(fn: Any) -> Mapping[str, Sequence[str]]:
    """``fn``'s declared categories (``DeclaresCategories``), or none."""
    return fn.categories if isinstance(fn, DeclaresCategories) else {}
