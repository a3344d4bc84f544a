"""Every check a run gets before anything loads: the config's cross-field checks, then
the memory plan's. ``grouprl plan``, ``grouprl train`` and ``grouprl submit`` call it
through ``driver.preflight.check_before_loading``, which adds the run's inputs (data
files, reward functions): those checks import the data and reward packages, a layer
above this one. ``grouprl plan`` takes the problems as a list (``checked_run``) so that
it prints its tables before them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from grouprl.config.checks import Derived, config_problems, derived_numbers, raise_problems
from grouprl.config.schema import RunConfig
from grouprl.plan.gpu_memory import gpu_memory_problems, gpu_name_problems


@dataclass(frozen=True)
class Checked:
    """A run's checks, not raised."""

    derived: Derived | None  # None: the config's own checks failed (no numbers to derive)
    problems: list[str]  # empty: the run may start


def checked_run(cfg: RunConfig, *, inputs: Sequence[str] = ()) -> Checked:
    """Every cross-field problem, a ``cluster.gpu`` the planner does not know and the
    ``inputs`` problems (found by the caller); once the first two pass, the derived
    quantities and the memory plan's problems (none when a model's config.json is
    unknown)."""
    problems = [*config_problems(cfg), *gpu_name_problems(cfg)]
    if problems:
        return Checked(None, [*problems, *inputs])
    derived = derived_numbers(cfg)
    return Checked(derived, [*inputs, *gpu_memory_problems(cfg, derived)])


def check_run(cfg: RunConfig, *, inputs: Sequence[str] = ()) -> Derived:
    """``checked_run``, raising one ``ConfigError`` that lists its problems. Returns the
    derived quantities."""
    checked = checked_run(cfg, inputs=inputs)
    raise_problems(checked.problems)
    assert checked.derived is not None  # no problems: the config's checks passed
    return checked.derived
