"""Every check a run gets before anything loads: the config's cross-field checks, then
the memory plan's. ``grouprl plan``, ``grouprl train`` and ``grouprl submit`` call it
through ``driver.preflight.check_before_loading``, which adds the run's inputs (data
files, reward functions): those checks import the data and reward packages, a layer
above this one."""

from __future__ import annotations

from collections.abc import Sequence

from grouprl.config.checks import Derived, config_problems, derived_numbers, raise_problems
from grouprl.config.schema import RunConfig
from grouprl.plan.gpu_memory import gpu_memory_problems, gpu_name_problems


def check_run(cfg: RunConfig, *, inputs: Sequence[str] = ()) -> Derived:
    """Raise ``ConfigError`` listing every cross-field problem, a ``cluster.gpu`` the
    planner does not know and the ``inputs`` problems (found by the caller); once those
    pass, the memory plan's (skipped when a model's config.json is unknown). Returns the
    derived quantities."""
    raise_problems([*config_problems(cfg), *gpu_name_problems(cfg), *inputs])
    derived = derived_numbers(cfg)
    raise_problems(gpu_memory_problems(cfg, derived))
    return derived
