"""What an unknown config key most likely means. Imports no torch.

    bad key ──► moved? ──► a verl / TRL key? (config/aliases.py) ──► close spelling?
                (MOVED)    names the grouprl key and any unit change   (difflib)

Each function returns the message's text; the loader gathers every problem of a
recipe and its overrides into one ``ConfigError``.
"""

from __future__ import annotations

import difflib
import functools
import typing

from pydantic import BaseModel

from grouprl.config.aliases import ALIASES
from grouprl.config.renamed import Alias
from grouprl.config.schema import RunConfig

MIGRATION_DOC = "docs/migration.md"

MOVED = {
    "trainer.save_every": "checkpoint.disk.every",
    "trainer.keep_last": "checkpoint.disk.keep",
}
"""Keys that moved: the error names the new place."""


def model_in(annotation: object) -> type[BaseModel] | None:
    """The section class inside an annotation such as ``X``, ``X | None`` or ``list[X]``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = model_in(arg)
        if found is not None:
            return found
    return None


def is_list(annotation: object) -> bool:
    """Whether ``annotation`` is, or holds, a ``list[...]``."""
    return typing.get_origin(annotation) is list or any(map(is_list, typing.get_args(annotation)))


def all_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every dotted key of ``model``, sections and values (list entries not expanded)."""
    paths = []
    for name, field in model.model_fields.items():
        path = prefix + name
        paths.append(path)
        inner = model_in(field.annotation)
        if inner is not None and not is_list(field.annotation):
            paths.extend(all_paths(inner, prefix=path + "."))
    return paths


@functools.cache
def _grouprl_leaves() -> frozenset[str]:
    return frozenset(path.rpartition(".")[2] for path in all_paths(RunConfig))


@functools.cache
def _foreign_sections() -> frozenset[str]:
    """verl's top-level sections that grouprl does not have (``actor_rollout_ref``, ...)."""
    tops = {a.key.partition(".")[0] for a in ALIASES if a.framework == "verl" and "." in a.key}
    return frozenset(tops - set(RunConfig.model_fields))


def find_alias(path: str) -> tuple[Alias, bool] | None:
    """The entry a bad key most likely means, and whether the key is (the tail of) its key
    rather than a guess from the last part alone.

    In order: the key itself (``actor_rollout_ref.rollout.n``, ``num_generations``); the
    key as the tail of an entry (``ppo_mini_batch_size``, ``rollout.tensor_model_parallel_size``);
    then, for a key placed in a grouprl section (``algo.adv_estimator``), its last part,
    when that is no grouprl key's name and every entry with that name means the same.
    """
    exact = [alias for alias in ALIASES if alias.key == path]
    tail = [alias for alias in ALIASES if alias.key.endswith("." + path)]
    if exact or tail:
        return (exact or tail)[0], True
    leaf = path.rpartition(".")[2]
    if leaf in _grouprl_leaves():
        return None
    same_leaf = [alias for alias in ALIASES if alias.leaf == leaf]
    if same_leaf and len({alias.grouprl for alias in same_leaf}) == 1:
        return same_leaf[0], False
    return None


def alias_hint(given: str, *, origin: str) -> str | None:
    """The message for a key that moved or is verl's or TRL's, naming the grouprl key and
    any unit change; None when it is neither."""
    if given in MOVED:
        return (
            f"{given} (in {origin}) has moved to {MOVED[given]}; rename the key (the "
            "`checkpoint:` section sets each tier: memory, disk, s3)"
        )
    found = find_alias(given)
    if found is None:
        return None
    alias, exact = found
    if not exact:
        head = f"it looks like {alias.framework}'s {alias.key}"
    elif given == alias.key:
        head = f"it is {alias.framework}'s key"
    else:
        head = f"it is {alias.framework}'s {alias.key}"
    if alias.grouprl:
        *first, last = alias.grouprl
        keys = f"{', '.join(first)} and {last}" if first else last
        noun = "keys are" if len(alias.grouprl) > 1 else "key is"
        note = f"; {alias.note}" if alias.note else ""
        hint = f"{head}; grouprl's {noun} {keys}{note}."
    else:
        hint = f"{head}; grouprl has no equivalent: {alias.note}; remove the key."
    return f"unknown key {given!r} in {origin}: {hint} {MIGRATION_DOC} maps verl's and TRL's keys."


def spelling_hint(*, path: str, model: type[BaseModel], origin: str) -> str:
    """The message for ``path``, whose last part ``model`` lacks: close keys, then the list."""
    bad = path.rpartition(".")[2]
    fields = list(model.model_fields)
    near = difflib.get_close_matches(bad, fields, n=3, cutoff=0.6)
    section = path.rpartition(".")[0]
    suggestions = [f"{section}.{f}" if section else f for f in near]
    elsewhere = {p.rpartition(".")[2]: p for p in all_paths(RunConfig)}
    for leaf in difflib.get_close_matches(bad, list(elsewhere), n=3, cutoff=0.8):
        if elsewhere[leaf] not in suggestions:
            suggestions.append(elsewhere[leaf])
    hint = f" Did you mean {' or '.join(suggestions[:3])}?" if suggestions else ""
    if not section and bad in _foreign_sections():
        hint += f" {bad!r} is a verl section; {MIGRATION_DOC} maps verl's keys to grouprl's."
    owner = section or "the top level"
    return (
        f"unknown key {path!r} in {origin}.{hint}\n  Keys allowed in {owner}: {', '.join(fields)}"
    )


def unknown_in_recipe(
    *, path: str, value: object, model: type[BaseModel], origin: str
) -> list[str]:
    """A recipe's key ``path``, which ``model`` lacks, holding ``value``: a message for each
    verl or TRL key inside it, and one for the rest."""
    leaves = _leaf_paths(path, value)
    messages, rest = [], []
    for leaf in leaves:
        hint = alias_hint(leaf, origin=origin)
        (messages if hint else rest).append(hint or leaf)
    if rest:
        message = spelling_hint(path=path, model=model, origin=origin)
        if rest != [path]:
            first, _, allowed = message.partition("\n")
            message = f"{first} It holds {', '.join(rest)}.\n{allowed}"
        messages.append(message)
    return messages


def _leaf_paths(path: str, value: object) -> list[str]:
    if not isinstance(value, dict) or not value:
        return [path]
    return [leaf for key, sub in value.items() for leaf in _leaf_paths(f"{path}.{key}", sub)]
