"""The configured environment, by ``env.name``; every one is built from ``env.args``.

single_turn ──► SingleTurnEnv (envs/single_turn.py)               in this process
search_qa   ──► SearchQA(**env.args, ctx=...) (envs/tool_env.py)   in this process
yours       ──► a registered factory or a class by import path (envs/loader.py)
                in env.sandbox.workers processes (envs/contained.py); 0 workers: here
"""

from __future__ import annotations

from grouprl.config.env import EnvConfig
from grouprl.config.model_data import DataConfig
from grouprl.envs.base import Environment
from grouprl.envs.contained import contain
from grouprl.envs.loader import build_user_env, env_context, resolve_env
from grouprl.envs.single_turn import SingleTurnEnv
from grouprl.envs.tool_env import SearchQA


def make_env(cfg: EnvConfig, data: DataConfig, *, cache_dir) -> Environment:
    """The environment ``cfg.name`` names, with ``cfg.args`` checked against it (a
    ``ConfigError`` names the key); ``close()`` a contained one when the run ends."""
    target = resolve_env(cfg)
    if cfg.name == "single_turn":
        return SingleTurnEnv.from_data(data)
    if cfg.name == "search_qa":
        return SearchQA(**cfg.args, ctx=env_context(cfg, data, cache_dir=cache_dir))
    if cfg.sandbox.workers == 0:
        return build_user_env(target, cfg, data, cache_dir=cache_dir)
    return contain(target, cfg, data, cache_dir=str(cache_dir))
