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

from grouprl.config.env import EnvConfig
from grouprl.config.errors import ConfigError
from grouprl.config.imports import absolute_import_path, is_import_path
from grouprl.config.model_data import DataConfig
from grouprl.config.renamed import RENAMED
from grouprl.envs.base import EnvContext, Environment
from grouprl.envs.registry import BUILT_IN, ENVS
from grouprl.rewards.args import type_problem  # a reward's args get the same check

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
        """Whether the environment is the user's (it runs in ``env.sandbox.workers`` processes)."""
        return self.kind != "built_in"


def resolve_env(cfg: EnvConfig) -> EnvTarget:
    """``cfg.name`` resolved, with ``cfg.args`` checked; raises ``ConfigError`` naming the key."""
    factory, problems = _checked(cfg)
    if problems:
        raise ConfigError("\n".join(problems))
    if cfg.name in BUILT_IN:
        return EnvTarget(kind="built_in", name=cfg.name)
    kind = "import_path" if is_import_path(cfg.name) else "registered"
    return EnvTarget(kind=kind, name=absolute_import_path(cfg.name), factory=factory)


def env_config_problems(cfg: EnvConfig, *, missing_ok: bool = False) -> list[str]:
    """Why ``env.name`` / ``env.args`` would not make an environment, as messages ([]: it
    would). An import path is imported (a file is run), as the run would, and its class
    and ``env.args`` checked against its ``__init__``; a registered factory that runs in
    worker processes must reach them (``sandbox/user_code.py``). ``missing_ok``: a module
    or file absent here is left to the machine that runs the job (``grouprl submit``)."""
    return _checked(cfg, missing_ok=missing_ok)[1]


def _checked(cfg: EnvConfig, *, missing_ok: bool = False) -> tuple[Any, list[str]]:
    """``(factory or class, problems)``; the factory is None for a built-in."""
    name, args = cfg.name, cfg.args
    found, problems = ENVS.check(name, missing_ok=missing_ok, sent=_in_workers(cfg))
    if name == "search_qa":  # a built-in class: env.args checked like your own class's
        from grouprl.envs.tool_env import SearchQA

        problems += args_problems(SearchQA, args)
    elif name in BUILT_IN:
        problems += [_ignored_arg(name, key, value) for key, value in args.items()]
    if found is not None and is_import_path(name):
        problems += args_problems(found, args)
    return found, problems


SEARCH_ARGS = ("corpus", "k", "max_chars", "timeout_s", "turn_reward")
"""``search_qa``'s own settings (``SearchQA.__init__``), once keys of ``env`` itself."""


def _ignored_arg(name: str, key: str, value: object) -> str:
    """``env.args.KEY`` given to the built-in ``name`` (other than search_qa), which takes
    none: it would be ignored."""
    ignored = (
        f"env.args.{key}: env.name={name} is built in and takes no env.args, so "
        f"env.args.{key}={value!r} would be ignored."
    )
    if key not in SEARCH_ARGS:
        return f"{ignored} Fix: remove env.args.{key}."
    old = next((a.key for a in RENAMED if a.grouprl[0] == f"env.args.{key}"), None)
    also = f" (old name {old})" if old else ""
    return (
        f"{ignored} It is a setting of env.name=search_qa. Fix: remove env.args.{key}{also}, "
        "or set env.name=search_qa."
    )


def _in_workers(cfg: EnvConfig) -> bool:
    """Whether the user's environment runs in worker processes (``env.sandbox.workers``)."""
    return cfg.sandbox.workers > 0


def takes_ctx(cls: Callable[..., Any]) -> bool:
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
            problem = type_problem(hints[key], value)
            if problem:
                problems.append(f"env.args.{key}={value!r}: {shown} expects {problem}")
    return problems


def _parameters(cls: Callable[..., Any]) -> dict[str, inspect.Parameter]:
    try:
        return dict(inspect.signature(cls).parameters)
    except (TypeError, ValueError):  # a builtin or C class: nothing to check against
        return {"kwargs": inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)}


def _hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls.__init__, include_extras=True)  # Annotated bounds
    except Exception:  # an annotation that does not evaluate: leave the values unchecked
        return {}


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
) -> Environment:
    """The user's environment, built in this process (a worker, or the driver with
    ``env.sandbox.workers=0``): ``cls(**env.args[, ctx=...])`` or the registered factory's."""
    assert target.factory is not None, target
    if target.kind == "registered":
        return target.factory(cfg, data, cache_dir=cache_dir)
    cls = target.factory
    extra = {"ctx": env_context(cfg, data, cache_dir=cache_dir)} if takes_ctx(cls) else {}
    return cls(**cfg.args, **extra)
