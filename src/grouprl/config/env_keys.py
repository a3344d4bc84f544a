"""Settings of ``env`` that the run would not read are refused, not silently dropped.

Which keys each kind of ``env`` reads::

    env.name=single_turn | search_qa   built in, runs in this process: no env.sandbox,
                                       env.network or env.concurrency
    your environment (env.name=FILE.py:Class, or registered)
                                       env.sandbox, env.network, env.concurrency
    your agent (env.agent=FILE.py:solve)
                                       env.sandbox but its timeout_s (an episode is bounded
                                       by env.agent.timeout_s), env.network; agents at once
                                       per worker: env.agent.concurrency, not env.concurrency
    env.sandbox.workers=0              either in this process: nothing keeps env.network=false

A key given a value other than its default must change the run (as ``ignored_keys``
holds ``algo`` keys to it). Equal to the default counts as unset: a run's saved
``config.yaml`` writes every key, and ``grouprl eval RUN`` reads it back. The other
settings that would be ignored are refused where they are checked: search_qa's
``env.args`` with another environment in ``envs/loader.py``, ``env.agent.*`` without
``env.agent.name`` by the schema. Imports no torch.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from grouprl.config.env import ENV_SANDBOX, EnvConfig
from grouprl.config.errors import show
from grouprl.config.renamed import OLD_NAMES
from grouprl.config.schema import RunConfig

BUILT_IN_ENVS = ("single_turn", "search_qa")
"""The environments grouprl ships (made in ``envs/factory.py``; they run in-process)."""

StopReason = Literal[
    "answered",
    "max_turns",
    "context_overflow",
    "max_tokens",
    "parse_error",
    "tool_error",
    "env_error",
]
"""Why an episode ended (``Trajectory.stop_reason``); here so that the config checks know
the ``episode/stop/REASON`` metrics without importing ``envs``."""
STOP_REASONS: tuple[str, ...] = get_args(StopReason)

SANDBOX_KEYS = ("workers", "memory_mb", "memory_limit", "timeout_s")


def env_key_problems(cfg: RunConfig) -> list[str]:
    """One message per ``env`` key set away from its default that the run would not read."""
    env = cfg.env
    if env.agent is not None:
        return _agent_problems(env)
    if env.name in BUILT_IN_ENVS:
        return _built_in_problems(env)
    return _network_problems(env, runs="your environment")


def _changed(env: EnvConfig, key: str) -> tuple[Any, Any] | None:
    """``(value, default)`` of ``env.KEY`` or ``env.sandbox.KEY`` when they differ."""
    if key.startswith("sandbox."):
        leaf = key.removeprefix("sandbox.")
        value, default = dict(env.sandbox)[leaf], dict(ENV_SANDBOX)[leaf]
    else:
        value, default = dict(env)[key], EnvConfig.model_fields[key].default
    return None if value == default else (value, default)


def _named(key: str, value: object) -> str:
    """``env.sandbox.workers=4 (old name env.workers)``."""
    old = OLD_NAMES.get(f"env.{key}")
    return f"env.{key}={show(value)}" + (f" (old name {old})" if old else "")


def _built_in_problems(env: EnvConfig) -> list[str]:
    problems = []
    for key in (*(f"sandbox.{k}" for k in SANDBOX_KEYS), "network", "concurrency"):
        changed = _changed(env, key)
        if changed is None:
            continue
        value, default = changed
        problems.append(
            f"{_named(key, value)} would be ignored: env.name={env.name} is built in and "
            f"runs in this process; env.{key} applies to the worker processes of your own "
            "environment (env.name=FILE.py:Class) or agent (env.agent=FILE.py:solve). Fix: "
            f"remove env.{key} (its default: {show(default)})."
        )
    return problems


def _agent_problems(env: EnvConfig) -> list[str]:
    agent, problems = env.agent, []
    assert agent is not None
    if (changed := _changed(env, "sandbox.timeout_s")) is not None:
        problems.append(
            f"{_named('sandbox.timeout_s', changed[0])} would be ignored: it bounds an "
            "environment's start and step calls, and an agent makes none; each agent's "
            f"episode is bounded by env.agent.timeout_s={show(agent.timeout_s)}. Fix: set "
            f"env.agent.timeout_s={show(changed[0])} instead, and remove env.sandbox.timeout_s."
        )
    if (changed := _changed(env, "concurrency")) is not None:
        problems.append(
            f"env.concurrency={show(changed[0])} would be ignored: it paces environment "
            "steps, and an agent drives its own episode; agents at once in each worker: "
            f"env.agent.concurrency={agent.concurrency}. Fix: set "
            f"env.agent.concurrency={show(changed[0])} instead, and remove env.concurrency."
        )
    if not env.network and env.sandbox.workers > 0:  # with none: _network_problems says why
        problems.append(
            "env.network=false with env.agent: your agent reaches the gateway (on this "
            "machine's loopback) over the network, which a network namespace takes away, so "
            "every episode would fail. Fix: remove env.network=false (agents need it)."
        )
    return problems + _network_problems(env, runs="your agent")


def _network_problems(env: EnvConfig, *, runs: str) -> list[str]:
    """``env.network=false`` is kept by each worker's own network namespace: with no
    workers, nothing keeps it."""
    if env.network or env.sandbox.workers > 0:
        return []
    return [
        f"env.network=false cannot be kept with env.sandbox.workers=0: {runs} then runs in "
        "this process, which keeps its network. Fix: env.sandbox.workers=1 or more (each "
        "worker runs in its own network namespace), or remove env.network."
    ]
