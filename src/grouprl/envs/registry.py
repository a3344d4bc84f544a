"""Environments by name: the built-ins, and your own registered from Python.

    env.name ──► single_turn: one completion per prompt (``envs/single_turn.py``)
             ├─► search_qa:   the search tool agent (``envs/tool_env.py``)
             ├─► registered:  ENVIRONMENTS[name](cfg.env, cfg.data, cache_dir=DIR)
             └─► an import path (``module:Class``, ``file.py:Class``): ``envs/loader.py``

A registered factory is called once per run in each of the environment's worker
processes (``env.workers``; in the process that runs the loop with ``env.workers=0``),
with the ``env`` and ``data`` sections and a cache directory shared by runs; it returns
an ``Environment`` (``envs/base.py``). It reaches the workers by reference, so it must be
a module-level function. A separate process (``grouprl submit``, a launcher) knows only
the built-ins and import paths.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grouprl.config.errors import ConfigError

BUILT_IN = ("single_turn", "search_qa")

EnvFactory = Callable[..., Any]
"""``factory(env_cfg, data_cfg, *, cache_dir) -> Environment``."""

ENVIRONMENTS: dict[str, EnvFactory] = {}
"""Environments registered with ``register_env`` (the built-ins are not listed here)."""


def register_env(name: str, factory: EnvFactory) -> EnvFactory:
    """Makes ``factory`` the environment ``env.name=name``; a name is registered once."""
    if not isinstance(name, str) or not name.strip() or ":" in name:
        raise ConfigError(
            f"register_env: name={name!r}; an environment's name is a non-empty string "
            "without ':' (that marks an import path, which works without registering)"
        )
    if not callable(factory):
        raise ConfigError(
            f"register_env({name!r}, ...): the factory is a {type(factory).__name__}, not a "
            "callable; pass a function (env_cfg, data_cfg, *, cache_dir) -> Environment"
        )
    if name in BUILT_IN or name in ENVIRONMENTS:
        raise ConfigError(
            f"register_env: environment {name!r} is already registered; choose another name "
            f"(taken: {', '.join(known_envs())})"
        )
    ENVIRONMENTS[name] = factory
    return factory


def known_envs() -> list[str]:
    return [*BUILT_IN, *sorted(ENVIRONMENTS)]


def env_problems(name: str) -> list[str]:
    """Why ``env.name`` names no environment ([] when it is built in or registered)."""
    if name in BUILT_IN or name in ENVIRONMENTS:
        return []
    return [
        f"env.name={name!r} is not an environment. Allowed: {', '.join(known_envs())}, or "
        "your class by import path (`my_pkg.envs:MyEnv` or `path/to/env.py:MyEnv`, "
        "docs/environments.md). Fix: choose one of those, or register yours first in the "
        "process that trains (grouprl.register_env(name, factory), docs/python-api.md)."
    ]


def check_env_name(name: str) -> None:
    """Raises ``ConfigError`` unless ``env.name`` is a built-in or registered environment."""
    for problem in env_problems(name):
        raise ConfigError(problem)


def registered_env(name: str) -> EnvFactory:
    """The factory registered as ``name`` (not a built-in)."""
    check_env_name(name)
    return ENVIRONMENTS[name]
