"""The environment section of ``grouprl plan``: which environment, its settings, its
turn limit and how its code runs (one row each; add a row for a new setting here).

Torch-free and import-free: the class named by ``env.name`` is imported by the checks
before the plan prints (``driver/preflight.py``), not here.
"""

from __future__ import annotations

from grouprl.config.containment import FAILED_SAMPLES
from grouprl.config.env import EnvConfig
from grouprl.config.errors import show
from grouprl.config.schema import RunConfig
from grouprl.plan.rows import Row

BUILT_IN = {
    "single_turn": "one completion per prompt, scored as it ends",
    "search_qa": "the search agent: answers with <answer>, looks things up with a search tool",
}


def env_rows(cfg: RunConfig) -> list[Row]:
    env = cfg.env
    if env.agent is not None:
        return [_gateway_row(cfg)]
    if env.name == "single_turn":
        return [("environment", "single_turn", BUILT_IN["single_turn"]), _gateway_row(cfg)]
    return [
        _which(env),
        *_args(env),
        ("max turns", str(env.max_turns), f"up to {env.max_turns} model turns (env.max_turns)"),
        _tools(env),
        _containment(env),
        _gateway_row(cfg),
    ]


def _which(env: EnvConfig) -> Row:
    if env.name in BUILT_IN:
        return ("environment", env.name, BUILT_IN[env.name])
    if ":" in env.name:
        module, _, cls = env.name.rpartition(":")
        return ("environment", cls, f"class {cls} from {module} (env.name)")
    return ("environment", env.name, "registered from Python (grouprl.register_env)")


def _args(env: EnvConfig) -> list[Row]:
    if not env.args:
        return [("env args", "none", "env.args: the class's defaults")]
    shown = ", ".join(f"{k}={show(v)}" for k, v in env.args.items())
    return [("env args", str(len(env.args)), f"env.args, passed as keyword arguments: {shown}")]


def _tools(env: EnvConfig) -> Row:
    if env.name == "search_qa":
        how = (
            f"BM25 search, {env.tool_format} tool calls (env.tool_format); corpus, k, "
            "max_chars, timeout_s and turn_reward from env.args (unset: the class's defaults, "
            "docs/agents.md); the <answer> turn is scored by the reward functions"
        )
        return ("tools", "search", how)
    return ("tools", "the class's", f"its own (a Toolbox: env.tool_format={env.tool_format})")


def _containment(env: EnvConfig) -> Row:
    if env.name in BUILT_IN:
        return ("runs", "in-process", "built in: package code, in the driver")
    box = env.sandbox
    if box.workers == 0:
        why = "env.sandbox.workers=0: in the driver, uncontained, no deadline"
        return ("runs", "in-process", why)
    memory = "no memory limit" if box.memory_mb is None else f"{box.memory_mb} MB each"
    network = "network" if env.network else "no network"
    return (
        "runs",
        f"{box.workers} workers",
        f"env.sandbox.workers processes ({memory}, {network}), {env.concurrency} steps at "
        f"once in each (env.concurrency); start/step calls killed after "
        f"{show(box.timeout_s)} s (env.sandbox.timeout_s): the episode ends env_error, "
        f"{FAILED_SAMPLES[env.on_error]} (env.on_error={env.on_error})",
    )


def _gateway_row(cfg: RunConfig) -> Row:
    env, agent, box = cfg.env, cfg.env.agent, cfg.env.sandbox
    if agent is None:
        return ("agent gateway", "off", "set env.agent to train your own agent (docs/gateway.md)")
    memory = "no memory limit" if box.memory_mb is None else f"{box.memory_mb} MB each"
    return (
        "agent gateway",
        "on",
        f"env.agent={agent.name} drives each episode ({cfg.rollout.n} per row), "
        f"{agent.concurrency} at a time in each of env.sandbox.workers={box.workers} "
        f"processes ({memory}), each within env.agent.timeout_s={show(agent.timeout_s)} s, "
        "against an OpenAI-compatible endpoint on 127.0.0.1 that records its tokens (the run's "
        f"sampling settings; up to {env.max_turns} model calls, env.max_turns); a returned or "
        "reported reward replaces the reward functions'",
    )
