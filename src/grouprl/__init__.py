"""grouprl: reinforcement-learning post-training of LLMs (GRPO and family).

The Python API is ``grouprl/api.py`` (docs/python-api.md). Importing the package is cheap:
its names load on first use, and no torch until ``train`` or ``evaluate`` runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grouprl.lazy import lazy_getattr

__version__ = "0.1.0"

_API = {
    "load_config": "grouprl.api",
    "check_config": "grouprl.api",
    "train": "grouprl.api",
    "evaluate": "grouprl.api",
    "register_reward": "grouprl.api",
    "register_env": "grouprl.api",
    "RunConfig": "grouprl.config.schema",
    "ConfigError": "grouprl.config.errors",
    "CannotTrain": "grouprl.rewards.failures",
    "Step": "grouprl.envs",
    "ToolCall": "grouprl.envs",
    "Toolbox": "grouprl.envs",
    "EnvContext": "grouprl.envs",
}
__all__ = [
    "CannotTrain",
    "ConfigError",
    "EnvContext",
    "RunConfig",
    "Step",
    "ToolCall",
    "Toolbox",
    "__version__",
    "check_config",
    "evaluate",
    "load_config",
    "register_env",
    "register_reward",
    "train",
]

if TYPE_CHECKING:
    from grouprl.api import (
        check_config,
        evaluate,
        load_config,
        register_env,
        register_reward,
        train,
    )
    from grouprl.config.errors import ConfigError
    from grouprl.config.schema import RunConfig
    from grouprl.envs import EnvContext, Step, Toolbox, ToolCall
    from grouprl.rewards.failures import CannotTrain


__getattr__ = lazy_getattr(__name__, _API)  # the API's names, imported when first used


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})
