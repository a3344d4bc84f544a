"""The optional graders (the ``graders`` extra: math-verify and reasoning-gym) checked
before anything loads, for ``grouprl plan`` and the start of a run: a grader whose package
is missing, a ``reasoning_gym`` reward without reasoning-gym rows, and the reasoning-gym
sources themselves (``data/reasoning_gym.task_source_problems``).

A missing package would otherwise show as every sample's failure in the reward workers
(stopped by ``reward.failure_brake`` after the model loaded and generated).
"""

from __future__ import annotations

import importlib.util
from typing import Any

from grouprl.config.model_data import DataConfig
from grouprl.data.reasoning_gym import INSTALL, is_task_source, task_source_problems

PACKAGES = {"math_verify": "math_verify", "reasoning_gym": "reasoning_gym"}
"""Each grader's reward name -> the module it imports in the reward workers."""


def grader_problems(
    functions: list[Any], data: DataConfig, *, missing_ok: bool = False
) -> list[str]:
    """Why the graders named in ``reward.functions`` (``RewardFunction`` records) or the
    reasoning-gym sources of ``data`` would fail, as messages. ``missing_ok``: a package
    this machine lacks is not a problem (``grouprl submit``: the cluster may have it)."""
    problems = []
    for i, entry in enumerate(functions):
        module = PACKAGES.get(entry.name)
        if module is None or missing_ok or importlib.util.find_spec(module) is not None:
            continue
        problems.append(
            f"reward.functions.{i}.name={entry.name!r} needs the {module} package, which is "
            f"not installed. Install the graders extra: {INSTALL}."
        )
    names = [entry.name for entry in functions]
    if "reasoning_gym" in names and not is_task_source(data.train):
        problems.append(
            f"reward.functions.{names.index('reasoning_gym')}.name='reasoning_gym' scores "
            f"rows of a reasoning_gym:<task> source, but data.train.source="
            f"{data.train.label!r} is not one. Fix: data.train={{source: "
            "reasoning_gym:chain_sum, size: 1000}, or another reward function"
        )
    if missing_ok and importlib.util.find_spec("reasoning_gym") is None:
        return problems
    return problems + task_source_problems(data)
