"""Typed run configuration: load, check, derive, save. Imports no torch.

Typical use::

    cfg = load_config("tiny-arith", ["rollout.n=8"])  # schema-valid RunConfig
    derived = derive(cfg)  # cross-field checks, then the numbers plan and trainer share
"""

from grouprl.config.checks import Derived, check_config, derive, split_rows, steps_for_epochs
from grouprl.config.errors import ConfigError
from grouprl.config.loader import list_recipes, load_config
from grouprl.config.redact import RESOLVED_CONFIG_FILE, redacted_dict, save_resolved
from grouprl.config.schema import RunConfig

__all__ = [
    "RESOLVED_CONFIG_FILE",
    "ConfigError",
    "Derived",
    "RunConfig",
    "check_config",
    "derive",
    "list_recipes",
    "load_config",
    "redacted_dict",
    "save_resolved",
    "split_rows",
    "steps_for_epochs",
]
