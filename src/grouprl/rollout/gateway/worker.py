"""The user's agent (``env.agent``): resolved by import path, run in a worker process.

The contract (docs/gateway.md)::

    def solve(base_url: str, task: dict, **kwargs) -> float | None

called once per episode (``rollout.n`` per data row) in a worker process of the run's
agent pool. ``base_url`` is the episode's OpenAI-compatible endpoint
(``http://127.0.0.1:PORT/e/<episode>/v1``); ``task`` is the data row (``_index`` included);
``kwargs`` holds ``model`` (the name to send, any name works) and ``api_key`` (the episode
id, for clients that cannot change paths), and may grow: accept ``**kwargs``. It returns
the episode's reward, or None to take the reward reported with ``report_reward`` or else
let ``reward.functions`` score the last assistant message. An ``async def solve`` is awaited.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import numbers
import threading
from typing import Any

from grouprl.config.errors import ConfigError
from grouprl.config.imports import absent_here, absolute_import_path, is_import_path, load_attr
from grouprl.sandbox import worker_state

AgentFn = Any


def resolve_agent(spec: str) -> AgentFn:
    """The function ``env.agent`` names; ConfigError naming ``env.agent`` otherwise."""
    _, fn = load_attr(spec, key="env.agent", error=ConfigError, kind="agent")
    if not callable(fn):
        attr = spec.rpartition(":")[2]
        raise ConfigError(
            f"env.agent={spec!r}: {attr!r} is a {type(fn).__name__}, not a function; point it "
            "at `def solve(base_url: str, task: dict, **kwargs) -> float | None`"
        )
    return fn


def agent_problems(*, agent: str | None, env_name: str, missing_ok: bool = False) -> list[str]:
    """Why ``env.agent`` would not run ([] when unset or when it resolves): it is imported
    (a file is run), as the workers will. ``missing_ok``: a module or file absent here is
    left to the machine that runs the job (``grouprl submit``)."""
    if agent is None:
        return []
    if env_name != "single_turn":
        return [
            f"env.agent={agent!r} runs your agent against the gateway, but env.name={env_name!r} "
            "names an environment too; an agent drives its own episodes. Fix: remove env.name "
            "(keep the default single_turn), or remove env.agent"
        ]
    if missing_ok and is_import_path(agent) and absent_here(agent):
        return []
    try:
        resolve_agent(agent)
    except ConfigError as err:
        return [str(err)]
    return []


def run_agent(
    spec: str, base_url: str, task: dict[str, Any], kwargs: dict[str, Any]
) -> float | None:
    """Runs ``solve`` for one episode in a pool worker (resolved there once per worker, so
    file paths work in the child); returns its reward or None. Raises TypeError for any
    other return value."""
    state = worker_state()
    cache = state.setdefault("grouprl.agents", {})
    with state.setdefault("grouprl.agents.lock", threading.Lock()):  # agents start at once
        fn = cache.get(spec)
        if fn is None:
            fn = cache[spec] = resolve_agent(spec)
    value = fn(base_url, task, **kwargs)
    if inspect.isawaitable(value):
        value = asyncio.run(_awaited(value))
    if value is None:
        return None
    if not isinstance(value, numbers.Real) and hasattr(value, "item"):
        value = value.item()
    if not isinstance(value, numbers.Real) or not math.isfinite(value):  # a bool counts as 0/1
        raise TypeError(
            f"env.agent returned {type(value).__name__} {value!r:.80}; return a finite number "
            "(the reward) or None"
        )
    return float(value)


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def portable(spec: str) -> str:
    """``spec`` with a file path made absolute, for the worker processes."""
    return absolute_import_path(spec)
