"""Environments by name: the built-ins, and your own registered from Python.

    env.name ──► single_turn: one completion per prompt (``envs/single_turn.py``)
             ├─► search_qa:   the search tool agent (``envs/tool_env.py``)
             ├─► registered:  ENVIRONMENTS[name](cfg.env, cfg.data, cache_dir=DIR)
             └─► an import path (``module:Class``, ``file.py:Class``): ``envs/loader.py``

A registered factory is called once per run in each of the environment's worker
processes (``env.sandbox.workers``; in the process that runs the loop with 0 of them),
with the ``env`` and ``data`` sections and a cache directory shared by runs; it returns
an ``Environment`` (``envs/base.py``). It reaches the workers by reference, so it must be
a module-level function. A separate process (``grouprl submit``, a launcher) knows only
the built-ins and import paths.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grouprl.config.env_keys import BUILT_IN_ENVS
from grouprl.config.errors import ConfigError
from grouprl.sandbox.user_code import UserCode

BUILT_IN = BUILT_IN_ENVS

EnvFactory = Callable[..., Any]
"""``factory(env_cfg, data_cfg, *, cache_dir) -> Environment``."""


def _an_environment_class(value: object, attr: str) -> str | None:
    """Why ``value``, named by import path, is not an environment class (or None)."""
    if not isinstance(value, type):
        return (
            f"{attr!r} is a {type(value).__name__}, not an environment class. Fix: name a "
            "class whose episode(row) returns an episode with start() and step(model_text) "
            "(docs/environments.md); a factory function goes through grouprl.register_env"
        )
    if not callable(getattr(value, "episode", None)):
        return (
            f"class {value.__name__} has no episode(row) method, so it is not an "
            "environment. Fix: add episode(row) returning an object with start() and "
            "step(model_text) -> grouprl.envs.Step (docs/environments.md)"
        )
    return None


ENVS = UserCode(
    kind="env",
    key="env.name",
    noun="environment",
    error=ConfigError,
    expects=_an_environment_class,
    signature="a function (env_cfg, data_cfg, *, cache_dir) -> Environment",
    unknown=(
        "{key}={name!r} is not an environment. {hint}Allowed: {names}, or your class by "
        "import path (`my_pkg.envs:MyEnv` or `path/to/env.py:MyEnv`, docs/environments.md). "
        "Fix: choose one of those, or register yours first in the process that trains "
        "(grouprl.register_env(name, factory), docs/python-api.md)."
    ),
    members="classes and functions",
    workers="the environment's worker processes",
    uncontained=", or set env.sandbox.workers=0 to run episodes in this process, uncontained",
    built_in=BUILT_IN,
)
"""Environments: the built-ins (made in ``envs/factory.py``), ``grouprl.register_env``'s
factories, or classes by import path (``envs/loader.py``)."""

ENVIRONMENTS: dict[str, EnvFactory] = ENVS.registry
"""Environments registered with ``grouprl.register_env`` (the built-ins are not listed here)."""
