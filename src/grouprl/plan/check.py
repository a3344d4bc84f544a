"""Every check a run gets before anything loads: the config's cross-field checks, then
the memory plan's. ``grouprl plan``, ``grouprl train`` and ``grouprl submit`` call it."""

from __future__ import annotations

from grouprl.config.checks import Derived, config_problems, derived_numbers, raise_problems
from grouprl.config.schema import RunConfig
from grouprl.plan.gpu_memory import gpu_memory_problems, gpu_name_problems


def check_run(cfg: RunConfig) -> Derived:
    """Raise ``ConfigError`` listing every cross-field problem and a ``cluster.gpu`` the
    planner does not know; once those pass, the memory plan's (skipped when a model's
    config.json is unknown). Returns the derived quantities."""
    raise_problems([*config_problems(cfg), *gpu_name_problems(cfg)])
    derived = derived_numbers(cfg)
    raise_problems(gpu_memory_problems(cfg, derived))
    return derived
