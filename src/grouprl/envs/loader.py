"""What ``env.name`` names, checked before anything loads, and how it is built.

    env.name ──► single_turn | search_qa                built in (package code, in-process)
             ├─► a name from grouprl.register_env       factory(env_cfg, data_cfg, *, cache_dir)
             └─► my_pkg.envs:Calculator | env.py:Calc   cls(**env.args[, ctx=EnvContext])

The constructor contract of a class named by import path: ``cls(**env.args)``, plus
``ctx=EnvContext(...)`` (the data keys, ``env.max_turns``, a cache directory) when its
``__init__`` takes a keyword-only ``ctx``. ``env.args`` is checked against the signature
(unknown, missing and mistyped keys, each named ``env.args.<key>``) without calling it:
a constructor may be slow (an index to load), and runs in the environment's workers.
"""

from __future__ import annotations

import difflib
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from grouprl.config.errors import ConfigError
from grouprl.config.imports import absent_here, absolute_import_path, is_import_path, load_attr
from grouprl.config.schema import DataConfig, EnvConfig
from grouprl.envs.base import EnvContext
from grouprl.envs.registry import BUILT_IN, env_problems, registered_env

EnvKind = Literal["built_in", "registered", "import_path"]


@dataclass(frozen=True)
class EnvTarget:
    """``env.name`` resolved: a built-in, a registered factory or a class by import path."""

    kind: EnvKind
    name: str
    """As given; an import path's file made absolute (workers and later runs find it)."""
    factory: Callable[..., Any] | None = None
    """The registered factory, or the class."""

    @property
    def user_code(self) -> bool:
        """Whether the environment is the user's (it runs in ``env.workers`` processes)."""
        return self.kind != "built_in"


def resolve_env(cfg: EnvConfig) -> EnvTarget:
    """``cfg.name`` resolved, with ``cfg.args`` checked; raises ``ConfigError`` naming the key."""
    problems = env_config_problems(cfg)
    if problems:
        raise ConfigError("\n".join(problems))
    return _target(cfg.name)


def env_config_problems(cfg: EnvConfig, *, missing_ok: bool = False) -> list[str]:
    """Why ``env.name`` / ``env.args`` would not make an environment, as messages ([]: it
    would). An import path is imported (a file is run), as the run would, and its class
    and ``env.args`` checked against its ``__init__``. ``missing_ok``: a module or file
    absent here is left to the machine that runs the job (``grouprl submit``)."""
    name = cfg.name
    if not is_import_path(name):
        problems = env_problems(name)
        if not problems and name in BUILT_IN and cfg.args:
            keys = ", ".join(f"env.args.{k}" for k in cfg.args)
            problems.append(
                f"{keys}: env.name={name} is built in and takes no env.args; its settings "
                "are the env section's own keys (grouprl plan shows them). Fix: remove env.args."
            )
        return problems
    if missing_ok and absent_here(name):
        return []
    try:
        target = _target(name)
    except ConfigError as err:
        return [str(err)]
    return args_problems(target.factory, cfg.args)


def _target(name: str) -> EnvTarget:
    if name in BUILT_IN:
        return EnvTarget(kind="built_in", name=name)
    if not is_import_path(name):
        return EnvTarget(kind="registered", name=name, factory=registered_env(name))
    _, cls = load_attr(name, key="env.name", error=ConfigError, kind="env")
    where = f"env.name={name!r}"
    if not isinstance(cls, type):
        raise ConfigError(
            f"{where} is a {type(cls).__name__}, not an environment class. Fix: name a class "
            "whose episode(row) returns an episode with start() and step(model_text) "
            "(docs/environments.md); a factory function goes through grouprl.register_env"
        )
    if not callable(getattr(cls, "episode", None)):
        raise ConfigError(
            f"{where}: class {cls.__name__} has no episode(row) method, so it is not an "
            "environment. Fix: add episode(row) returning an object with start() and "
            "step(model_text) -> grouprl.envs.Step (docs/environments.md)"
        )
    return EnvTarget(kind="import_path", name=absolute_import_path(name), factory=cls)


def takes_ctx(cls: type) -> bool:
    """Whether ``cls.__init__`` takes the keyword-only ``ctx`` (an ``EnvContext``)."""
    param = _parameters(cls).get("ctx")
    return param is not None and param.kind is inspect.Parameter.KEYWORD_ONLY


def args_problems(cls: type, args: dict[str, Any]) -> list[str]:
    """``env.args`` against ``cls.__init__``: unknown keys, missing required ones, and
    values that do not fit an annotated type (checked with pydantic, strict: ``"3"`` is
    not an ``int``, ``3`` is a ``float``), each as a message naming ``env.args.<key>``."""
    params = _parameters(cls)
    takes = [
        p.name
        for p in params.values()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "ctx"
    ]
    open_ended = any(p.kind is p.VAR_KEYWORD for p in params.values())
    shown = f"{cls.__name__}({', '.join(takes)})"
    problems = []
    for key in args:
        if key not in takes and not (open_ended and key not in params):
            allowed = ", ".join(takes) or "no arguments"
            close = difflib.get_close_matches(key, takes, n=1)
            hint = f"Did you mean {close[0]!r}? " if close else ""
            problems.append(
                f"env.args.{key}: {shown} takes no argument {key!r} (it takes: {allowed}). "
                f"{hint}Fix: remove env.args.{key} or add it to {cls.__name__}.__init__"
            )
    for key in takes:
        if params[key].default is inspect.Parameter.empty and key not in args:
            problems.append(
                f"env.args.{key} is missing: {shown} requires it. Fix: set env.args.{key}"
            )
    hints = _hints(cls)
    for key, value in args.items():
        if key in takes and key in hints:
            problem = _type_problem(hints[key], value)
            if problem:
                problems.append(f"env.args.{key}={value!r}: {shown} expects {problem}")
    return problems


def _parameters(cls: type) -> dict[str, inspect.Parameter]:
    try:
        return dict(inspect.signature(cls).parameters)
    except (TypeError, ValueError):  # a builtin or C class: nothing to check against
        return {"kwargs": inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)}


def _hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls.__init__)
    except Exception:  # an annotation that does not evaluate: leave the values unchecked
        return {}


def _type_problem(annotation: Any, value: Any) -> str | None:
    from pydantic import TypeAdapter, ValidationError

    try:
        TypeAdapter(annotation).validate_python(value, strict=True)
    except ValidationError as err:
        first = err.errors()[0]
        return f"{inspect.formatannotation(annotation)} ({first['msg']})"
    except Exception:  # an annotation pydantic cannot check (a user class): accept
        return None
    return None


def env_context(cfg: EnvConfig, data: DataConfig, *, cache_dir: str | Path) -> EnvContext:
    return EnvContext(
        prompt_key=data.prompt_key,
        answer_key=data.answer_key,
        system_prompt=data.system_prompt,
        prompt_template=data.prompt_template,
        max_turns=cfg.max_turns,
        tool_format=cfg.tool_format,
        cache_dir=Path(cache_dir),
    )


def build_user_env(
    target: EnvTarget, cfg: EnvConfig, data: DataConfig, *, cache_dir: str | Path
) -> Any:
    """The user's environment, built in this process (a worker, or the driver with
    ``env.workers=0``): ``cls(**env.args[, ctx=...])`` or the registered factory's."""
    assert target.factory is not None, target
    if target.kind == "registered":
        return target.factory(cfg, data, cache_dir=cache_dir)
    cls = target.factory
    extra = {"ctx": env_context(cfg, data, cache_dir=cache_dir)} if takes_ctx(cls) else {}
    return cls(**cfg.args, **extra)
