"""The configured environment, by ``env.name``.

single_turn ──► SingleTurnEnv (envs/single_turn.py)            in this process
search_qa   ──► the search agent (envs/tool_env.py)            in this process
yours       ──► a registered factory or a class by import path (envs/loader.py)
                in env.workers processes (envs/contained.py); env.workers=0: here
"""

from __future__ import annotations

from grouprl.config.schema import DataConfig, EnvConfig
from grouprl.envs.base import Environment
from grouprl.envs.contained import contain
from grouprl.envs.loader import build_user_env, resolve_env
from grouprl.envs.single_turn import SingleTurnEnv
from grouprl.envs.tool_env import search_env


def make_env(cfg: EnvConfig, data: DataConfig, *, cache_dir) -> Environment:
    """The environment ``cfg.name`` names; ``close()`` a contained one when the run ends."""
    if cfg.name == "single_turn":
        return SingleTurnEnv.from_data(data)
    if cfg.name == "search_qa":
        return search_env(cfg, data, cache_dir=cache_dir)
    target = resolve_env(cfg)
    if cfg.workers == 0:
        return build_user_env(target, cfg, data, cache_dir=cache_dir)
    return contain(target, cfg, data, cache_dir=str(cache_dir))
