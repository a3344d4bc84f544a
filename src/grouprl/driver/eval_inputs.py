"""What `grouprl eval` is given, checked before anything loads (no torch): the target, a
run directory or a model, and the reward functions a run's saved config names.

A target that looks like a path (``assets.path_reason``) is read from disk only, so a
mistyped run directory fails at once with "not found" instead of a hub lookup; a hub name
costs one short try (``assets/hub.py``), not transformers' minute of retries.
"""

from __future__ import annotations

from pathlib import Path

from grouprl.assets import (
    BUILTIN_PREFIX,
    HUB_EXAMPLE,
    ModelPathError,
    model_path_problem,
    path_reason,
)
from grouprl.assets.hub import hub_problem
from grouprl.config.imports import is_import_path
from grouprl.config.schema import RunConfig
from grouprl.rewards.registry import REWARD_FUNCTIONS, RewardError

RUN_CHECKPOINTS = "checkpoints"


def run_dir_of_target(target: str) -> Path | None:
    """``target`` as a run directory (it holds ``checkpoints/``), else None: a model."""
    path = Path(target)
    return path if (path / RUN_CHECKPOINTS).is_dir() else None


def check_target(target: str) -> None:
    """Raises ``ModelPathError`` when ``target`` is neither a run directory, a model
    directory, ``builtin:`` nor a hub name that is cached or that the hub has (one
    request, ``assets.hub.hub_problem``)."""
    if run_dir_of_target(target) is not None:
        return
    allowed = (
        "give a run directory made by `grouprl train` (holding checkpoints/), a model "
        f"directory (holding config.json), a hub name such as {HUB_EXAMPLE}, or "
        "builtin:tiny-arith."
    )
    problem = model_path_problem(target, key="TARGET", allowed=allowed)
    if problem is None and not target.startswith(BUILTIN_PREFIX) and path_reason(target) is None:
        problem = hub_problem(target, key="TARGET", allowed=allowed)  # one try, no retries
    if problem is not None:
        raise ModelPathError(problem)


def check_saved_rewards(cfg: RunConfig, *, saved: Path) -> None:
    """A run's ``config.yaml`` keeps a reward's name only. A name that is neither built
    in nor an import path was registered from Python in the training script
    (``grouprl.register_reward``), which this process has not run: raises a
    ``RewardError`` saying so and how to evaluate the run, instead of a near built-in
    name."""
    run = saved.parent
    problems = []
    for i, function in enumerate(cfg.reward.functions):
        name = function.name
        if name in REWARD_FUNCTIONS or is_import_path(name):
            continue
        key = f"reward.functions.{i}.name"
        problems.append(
            f"{key}={name!r} ({saved}) is a reward the training run registered from "
            "Python (grouprl.register_reward in its script); this process has not "
            "registered it, and a run's config keeps only the name. To evaluate the run, "
            f"name the function by import path: `grouprl eval {run} "
            f"{key}=train_script.py:FUNCTION` (the script's file, or "
            "`my_package.module:FUNCTION`; the script must start training under `if "
            '__name__ == "__main__":`, which loading it skips), or from Python: call '
            f"grouprl.register_reward({name!r}, FUNCTION) as the script does, then "
            f"grouprl.evaluate({str(run)!r})."
        )
    if problems:
        raise RewardError("\n".join(problems))
