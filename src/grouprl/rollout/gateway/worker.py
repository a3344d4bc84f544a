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

import math
import numbers
import urllib.error
import urllib.request
from typing import Any

from grouprl.config.env import EnvConfig
from grouprl.config.errors import ConfigError
from grouprl.sandbox.user_code import UserCode, a_function, awaited_call

START_TIMEOUT_S = 30.0
"""How long an agent's worker waits for the gateway to take the episode's start."""

AGENTS = UserCode(
    kind="agent",
    key="env.agent",
    noun="agent",
    error=ConfigError,
    expects=a_function(
        "; point it at `def solve(base_url: str, task: dict, **kwargs) -> float | None`"
    ),
    signature="solve(base_url, task, **kwargs) -> float | None",
    unknown=(
        "{key}={name!r} is not an import path; write `my_pkg.agent:solve` or "
        "`path/to/agent.py:solve` (docs/gateway.md)"
    ),
    members="classes and functions",
    workers="the agent worker processes",
)
"""Agents, by import path (none are registered)."""


def agent_problems(env: EnvConfig, *, missing_ok: bool = False) -> list[str]:
    """Why ``env.agent`` would not run ([] when unset or when it resolves): it is imported
    (a file is run), as the workers will. ``missing_ok``: a module or file absent here is
    left to the machine that runs the job (``grouprl submit``)."""
    agent = _agent(env)
    if agent is None:
        return []
    if env.name != "single_turn":
        return [
            f"env.agent={agent!r} runs your agent against the gateway, but env.name={env.name!r} "
            "names an environment too; an agent drives its own episodes. Fix: remove env.name "
            "(keep the default single_turn), or remove env.agent"
        ]
    return AGENTS.problems(agent, missing_ok=missing_ok)


def _agent(env: EnvConfig) -> str | None:
    """``env.agent``'s import path, or None."""
    return None if env.agent is None else env.agent.name


def run_agent(
    spec: str, base_url: str, task: dict[str, Any], kwargs: dict[str, Any], *, network: bool = True
) -> float | None:
    """Runs ``solve`` for one episode in a pool worker (resolved there once per worker, so
    file paths work in the child); returns its reward or None. Raises TypeError for any
    other return value. Tells the gateway first that the episode starts
    (``start_episode``; ``network``: ``env.network``, for its message): a run again after
    its worker died starts it over."""
    start_episode(base_url, network=network)
    value = awaited_call(AGENTS.load(spec), base_url, task, **kwargs)
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


def start_episode(base_url: str, *, network: bool = True) -> None:
    """``POST {base_url}/start``: the gateway drops what an earlier run of this episode
    recorded (``Gateway.start``). Raises ConnectionError when this worker cannot reach the
    gateway, naming ``env.network`` only where it is off (``network`` False: the worker's
    own network namespace hides the gateway); with it on, the connection itself failed."""
    request = urllib.request.Request(
        f"{base_url.rstrip('/')}/start",
        data=b"{}",
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=START_TIMEOUT_S) as response:
            response.read()
    except urllib.error.HTTPError:
        raise
    except OSError as err:
        if not network:
            raise ConnectionError(
                f"the agent's worker cannot reach the gateway at {base_url} ({err}). With "
                "env.network=false each agent worker has a network namespace of its own, "
                "where 127.0.0.1 is not the gateway's: set env.network=true for agents"
            ) from None
        raise ConnectionError(
            f"the agent's worker lost its connection to the gateway at {base_url} while "
            f"starting the episode ({err}); env.network=true, so the worker shares the "
            "trainer's loopback: the gateway's side failed; only this episode fails"
        ) from None
