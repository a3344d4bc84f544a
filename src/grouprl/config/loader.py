"""Load a run: a YAML recipe plus dotted overrides, validated into ``RunConfig``.

    recipe (packaged name or path) ──► dict ──► key check ──► overrides ──► RunConfig
                                                (suggests)   (key.sub=YAML)   (pydantic)

Every unknown key of the recipe (and the recipes it extends) and of the overrides comes
in one ``ConfigError``, each with its hint (``config/key_hints.py``); a key grouprl renamed
(``config/renamed.py``) still works. Overrides follow Hydra's ``key.sub=value`` form; values
are parsed as YAML (``algo.beta=0.04``, ``reward.functions=[{name: format}]``); a list entry
is addressed by its index (``reward.functions.0.weight=0.5``) and a key of a free mapping
by its name (``env.args.k=3``). Cross-field checks are ``config.checks.check_config``.
"""

from __future__ import annotations

import copy
import difflib
import logging
import typing
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from grouprl.config.env import agent_shorthand
from grouprl.config.errors import ConfigError, raise_problems, show
from grouprl.config.field_text import reason_text, yaml_text
from grouprl.config.key_hints import alias_hint, is_list, model_in, spelling_hint, unknown_in_recipe
from grouprl.config.model_data import source_shorthand
from grouprl.config.renamed import RENAMED, rename_hint, renamed_to_new
from grouprl.config.schema import RunConfig

logger = logging.getLogger(__name__)

RECIPE_SUFFIXES = (".yaml", ".yml")
RECIPES_DIR = resources.files("grouprl") / "recipes"


def list_recipes() -> list[tuple[str, str]]:
    """Packaged recipes as ``(name, description)``, sorted by name."""
    found = []
    for entry in RECIPES_DIR.iterdir():
        if entry.name.endswith(RECIPE_SUFFIXES):
            data = yaml.safe_load(entry.read_text()) or {}
            found.append((entry.name.rsplit(".", 1)[0], str(data.get("description", ""))))
    return sorted(found)


def load_config(recipe: str | Mapping[str, Any], overrides: list[str]) -> RunConfig:
    """Read ``recipe`` (a packaged name, a YAML path, or a mapping of sections as a
    recipe file holds them), apply ``overrides``, validate.

    A recipe without a ``name`` takes its file name (a mapping: ``run``). Raises
    ``ConfigError``.
    """
    data, origin, problems = _load_recipe(recipe, chain=())
    set_by: dict[str, str] = {}
    for override in overrides:
        try:
            parts, value = _parse_override(override)
            parts = _renamed_override(parts, origin=f"override {override!r}")
            problem = _check_path(parts, origin=f"override {override!r}")
            if problem is None:
                _set_path(data, parts=parts, value=value, override=override)
                set_by[".".join(parts)] = override
        except ConfigError as err:
            problem = str(err)
        if problem is not None:
            problems.append(problem)
    raise_problems(problems, where="the recipe and overrides", bullets=True)
    try:
        return RunConfig.model_validate(data)
    except ValidationError as err:
        raise _explain(err, origin=origin, set_by=set_by) from None


# --- recipes -----------------------------------------------------------------

REPLACED_WHOLE = ("data.train", "data.eval")
"""Sections an extending recipe replaces whole instead of merging key by key: a data source
(another dataset must not inherit the parent's subset, split or limit)."""

SHORTHANDS = {
    "data.train": lambda value: source_shorthand(value, key="data.train"),
    "data.eval": lambda value: source_shorthand(value, key="data.eval"),
    "env.agent": agent_shorthand,
}
"""Sections that may be written as one value (``data.train=a.parquet``,
``env.agent=agent.py:solve``): the mapping each means, made before a key inside is set."""


def _load_recipe(
    recipe: str | Mapping[str, Any], *, chain: tuple[str, ...]
) -> tuple[dict, str, list[str]]:
    """The recipe's mapping, with the recipe it ``extends`` merged underneath, its origin
    (for messages), and the unknown keys found in it and its bases.

    A recipe may start from another (``extends: tiny-arith``, a packaged name or a path).
    Its sections are merged key by key and the extending recipe's values win, except that
    a data source (``REPLACED_WHOLE``) and every list are replaced whole. ``name`` and
    ``description`` are never inherited.
    """
    if isinstance(recipe, Mapping):  # from Python: copied, never changed in place
        origin, data, stem = "given as a mapping", copy.deepcopy(dict(recipe)), "run"
        recipe = origin
    else:
        origin, text, stem = _read_recipe(recipe)
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as err:
            raise ConfigError(f"recipe {origin} is not valid YAML:\n{err}") from None
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise ConfigError(
            f"recipe {origin} must be a YAML mapping of sections (model:, data:, ...), "
            f"not a {type(data).__name__}"
        )
    data.setdefault("name", stem)
    base_name = data.pop("extends", None)
    env = data.get("env")
    if isinstance(env, dict) and isinstance(env.get("agent"), str):
        env["agent"] = agent_shorthand(env["agent"])  # env.agent_timeout_s goes inside it
    problems = renamed_to_new(data, origin=f"recipe {origin}")  # old keys moved, with a hint
    problems += _check_keys(data, model=RunConfig, prefix="", origin=f"recipe {origin}")
    if base_name is None:
        return data, origin, problems
    if not isinstance(base_name, str):
        raise ConfigError(f"recipe {origin}: extends must be one recipe name or path")
    if base_name in (*chain, recipe):
        cycle = " -> ".join((*chain, recipe, base_name))
        raise ConfigError(f"recipe {origin}: extends makes a cycle ({cycle}); remove one link")
    base, _, base_problems = _load_recipe(base_name, chain=(*chain, recipe))
    base.pop("name")
    base.pop("description", None)
    return _merged(base, data), origin, base_problems + problems


def _renamed_override(parts: list[str], *, origin: str) -> list[str]:
    """An override's key, moved to its new name (with a hint) when grouprl renamed it."""
    key = ".".join(parts)
    for alias in RENAMED:
        if alias.key == key:
            logger.warning(rename_hint(alias, origin=origin))
            return alias.grouprl[0].split(".")
    return parts


def _merged(base: dict, over: dict, *, prefix: str = "") -> dict:
    out = dict(base)
    for key, value in over.items():
        path = f"{prefix}{key}"
        both_maps = isinstance(value, dict) and isinstance(out.get(key), dict)
        if both_maps and path not in REPLACED_WHOLE:
            out[key] = _merged(out[key], value, prefix=path + ".")
        else:
            out[key] = value
    return out


def _read_recipe(recipe: str) -> tuple[str, str, str]:
    """``(origin shown in errors, YAML text, default run name)``."""
    path = Path(recipe).expanduser()
    if path.suffix in RECIPE_SUFFIXES or "/" in recipe or path.is_file():
        if not path.is_file():
            raise ConfigError(
                f"recipe file {recipe} does not exist; give a path to a YAML file or one of "
                f"the packaged recipes: {', '.join(n for n, _ in list_recipes())}"
            )
        return str(path), path.read_text(), path.stem
    for suffix in RECIPE_SUFFIXES:
        entry = RECIPES_DIR / f"{recipe}{suffix}"
        if entry.is_file():
            return f"{recipe} (packaged)", entry.read_text(), recipe
    names = [name for name, _ in list_recipes()]
    close = difflib.get_close_matches(recipe, names, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ConfigError(
        f"unknown recipe {recipe!r}.{hint} Packaged recipes: {', '.join(names)} "
        "(`grouprl recipes` describes them); or give a path to a YAML file."
    )


# --- overrides ---------------------------------------------------------------


def _parse_override(override: str) -> tuple[list[str], Any]:
    key, sep, raw = override.partition("=")
    key = key.strip()
    if key.startswith("~"):
        raise ConfigError(_delete_hint(override, key=key.lstrip("~")))
    if not sep or not key:
        raise ConfigError(
            f"override {override!r} is not of the form key.sub=value "
            "(e.g. rollout.n=8, algo.beta=0.04, data.eval=null)"
        )
    if key[0] == "+":
        raise ConfigError(
            f"override {override!r}: grouprl does not use Hydra's '+' prefix (add a key); every "
            f"key already exists in the schema, so write {key.lstrip('+')}=value "
            "(use =null to unset a value)"
        )
    parts = key.split(".")
    if any(not part for part in parts):
        raise ConfigError(f"override {override!r}: key {key!r} has an empty part between dots")
    if raw == "":
        return parts, ""  # Hydra: `key=` is the empty string; write `key=null` for null
    try:
        return parts, yaml.safe_load(raw)
    except yaml.YAMLError as err:
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ConfigError(
            f"override {override!r}: the value is not valid YAML ({problem}); "
            f"quote text that contains YAML syntax, e.g. '{key}=\"...\"'"
        ) from None


def _delete_hint(override: str, *, key: str) -> str:
    """The message for Hydra's delete syntax (``~data.eval``), which grouprl has no use for:
    every key exists in the schema with a default."""
    head = (
        f"override {override!r}: Hydra's '~' deletes a key from the config, but grouprl's "
        "keys all exist in the schema (each with a default) and are not deleted."
    )
    field = _field_at(key.split("."))
    default = None if field is None else yaml_text(field.get_default(call_default_factory=True))
    if field is None:
        return (
            f"{head} Write KEY=null to turn off an optional section or value (e.g. "
            "data.eval=null, critic=null); docs/config.md lists every key and its default."
        )
    if field.is_required() or type(None) not in typing.get_args(field.annotation):
        return (
            f"{head} {key} cannot be turned off; set it to a value ({key}=VALUE), or leave "
            f"it out of the recipe for its default ({default})."
        )
    return (
        f"{head} To turn {key} off, write {key}=null (optional sections and values are "
        f"null when off); to get its default back, leave it out of the recipe ({default})."
    )


def _field_at(parts: list[str]) -> FieldInfo | None:
    """The schema's field at a dotted key (list indices skipped); None if there is none."""
    model: type[BaseModel] | None = RunConfig
    field = None
    for part in parts:
        if part.isdigit() and field is not None and is_list(field.annotation):
            continue
        if model is None or part not in model.model_fields:
            return None
        field = model.model_fields[part]
        model = model_in(field.annotation)
    return field


def _set_path(data: dict, *, parts: list[str], value: object, override: str) -> None:
    """Put ``value`` at ``parts`` in the nested recipe dict, creating sections as needed."""
    node: dict | list = data
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        where = ".".join(parts[:depth])
        if isinstance(node, list):
            index = int(part)
            if index >= len(node):
                raise ConfigError(
                    f"override {override!r}: {where} has no entry {index} (it has {len(node)}, "
                    f"numbered from 0); set the whole list instead, e.g. {where}=[...]"
                )
            if last:
                node[index] = value
            else:
                node = node[index]
            continue
        if last:
            node[part] = value
            continue
        shorthand = SHORTHANDS.get(".".join(parts[: depth + 1]))
        if shorthand is not None and node.get(part) is not None:
            # a section written as one value (`data.train=a.parquet`, `env.agent=a.py:solve`)
            node[part] = shorthand(node[part])
        if isinstance(node.get(part), dict | list):
            node = node[part]
        elif parts[depth + 1].isdigit():
            raise ConfigError(
                f"override {override!r}: {'.'.join(parts[: depth + 1])} is not set in the "
                "recipe, so it has no entries to index; set the whole list instead, e.g. "
                f"{'.'.join(parts[: depth + 1])}=[...]"
            )
        else:
            node[part] = {}
            node = node[part]


# --- key checks against the schema -------------------------------------------


def _check_keys(data: dict, *, model: type[BaseModel], prefix: str, origin: str) -> list[str]:
    """Every key the schema does not have, each with its hint (recurses into sections)."""
    problems = []
    for key, value in data.items():
        path = f"{prefix}{key}"
        if key not in model.model_fields:
            problems += unknown_in_recipe(path=path, value=value, model=model, origin=origin)
            continue
        annotation = model.model_fields[key].annotation
        inner = model_in(annotation)
        if inner is None:
            continue
        if isinstance(value, dict):
            problems += _check_keys(value, model=inner, prefix=path + ".", origin=origin)
        elif isinstance(value, list) and is_list(annotation):
            for i, item in enumerate(value):
                if isinstance(item, dict):
                    problems += _check_keys(item, model=inner, prefix=f"{path}.{i}.", origin=origin)
    return problems


def _check_path(parts: list[str], *, origin: str) -> str | None:
    """What is wrong with an override's dotted key (None: the schema has it), checked
    before it touches the recipe."""
    model: type[BaseModel] | None = RunConfig
    i = 0
    while i < len(parts):
        part, path = parts[i], ".".join(parts[: i + 1])
        if model is None:
            parent = ".".join(parts[:i])
            return (
                f"{origin}: {parent} is a value, not a section, so {path} does not exist; "
                f"write {parent}=VALUE"
            )
        if part not in model.model_fields:
            given = ".".join(parts)  # a verl or TRL key is named whole
            hint = alias_hint(given, origin=origin)
            return hint or spelling_hint(path=path, model=model, origin=origin)
        annotation = model.model_fields[part].annotation
        model = model_in(annotation)
        i += 1
        if typing.get_origin(annotation) is dict:
            return None  # its own keys (env.args.KEY): checked by whoever reads them
        if is_list(annotation) and i < len(parts):
            if not parts[i].isdigit():
                return (
                    f"{origin}: {path} is a list; address an entry by its index "
                    f"({path}.0.{parts[i]}) or set the whole list ({path}=[...])"
                )
            i += 1  # the list index; the entry has the fields of `model`
    return None


# --- pydantic errors in plain words ------------------------------------------


def _explain(err: ValidationError, *, origin: str, set_by: dict[str, str]) -> ConfigError:
    lines = []
    for problem in err.errors():
        path = ".".join(str(part) for part in problem["loc"])
        reason = reason_text(problem)
        source = next(
            (
                f"override {o!r}"
                for key, o in reversed(set_by.items())
                if path == key or path.startswith(key + ".")
            ),
            f"recipe {origin}",
        )
        if problem["type"] == "missing":
            lines.append(f"  {path} is required (missing in {source})")
            continue
        line = f"  {path} = {show(problem['input'])}: {reason} (from {source})"
        if problem["type"] == "string_type" and source.startswith("override"):
            line += (
                "\n    override values are parsed as YAML; quote text containing ': ' or "
                f"braces, e.g. '{path}=\"...\"'"
            )
        lines.append(line)
    count = "1 invalid value" if len(lines) == 1 else f"{len(lines)} invalid values"
    return ConfigError(
        f"{count} in the run configuration:\n"
        + "\n".join(lines)
        + "\n  Fix the value in the recipe or pass an override key.sub=value."
    )
