"""The Python API: what the command line does, as functions (``grouprl.train`` ...).

    import grouprl

    @grouprl.register_reward("short")
    def short(completion: str, *, reference, **kwargs) -> float: ...

    cfg = grouprl.load_config("tiny-arith", ["reward.functions=[{name: short}]"])
    summary = grouprl.train(cfg)                 # RUN/summary.json as a dict
    metrics = grouprl.evaluate(summary["run_dir"])

Every function checks what it is given before anything heavy loads (the schema,
batch arithmetic, memory, data files, reward functions, environment names, the run
directory) and raises the user errors the command line prints (``ConfigError``,
``RewardError``, ... all with ``user_error = True``). Importing this module imports no
torch; ``train`` and ``evaluate`` do. Rewards and environments registered here live in
this process, which is where a run scores and runs its episodes, also when its
training ranks and engines are Ray actors; ``grouprl submit`` and the launchers start
a new process that knows only the built-ins and import paths.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from os import PathLike
from pathlib import Path
from typing import Any, TypeVar

from grouprl.cluster.connection import check_local_ray
from grouprl.config import loader
from grouprl.config.checks import Derived
from grouprl.config.errors import ConfigError
from grouprl.config.redact import RESOLVED_CONFIG_FILE
from grouprl.config.schema import RunConfig
from grouprl.driver.preflight import check_before_loading
from grouprl.runtime import check_new_run
from grouprl.sandbox.main_guard import refuse_unguarded_main
from grouprl.sandbox.user_code import UserCode

DEFAULT_EVAL_RECIPE = "tiny-arith"
"""The recipe `evaluate` takes the held-out data, rewards and sampling from when its
target is a model rather than a run directory."""

Recipe = str | PathLike | Mapping[str, Any]
F = TypeVar("F", bound=Callable[..., Any])


def load_config(recipe: Recipe, overrides: Sequence[str] = (), *, check: bool = True) -> RunConfig:
    """The run configuration of ``recipe``: a packaged recipe name (``grouprl recipes``),
    a YAML path, or a mapping of sections as a recipe file holds them (``extends`` works
    in each), with dotted ``overrides`` (``["rollout.n=4", "algo.beta=0.04"]``) applied.

    ``check``: also run every check `grouprl plan` runs (batch arithmetic, memory, data
    files, reward functions, environment); register your rewards and environments first.
    Raises ``ConfigError`` (or ``RewardError``) naming the key, the value and the fix.
    """
    if isinstance(overrides, str):
        raise ConfigError(
            f"overrides={overrides!r} is one string; pass a list of key.sub=value strings, "
            f"e.g. [{overrides!r}]"
        )
    if isinstance(recipe, PathLike):
        recipe = str(recipe)
    cfg = loader.load_config(recipe, list(overrides))
    if check:
        check_config(cfg)
    return cfg


def check_config(cfg: RunConfig) -> Derived:
    """Every check before loading (``grouprl plan``'s); returns the derived quantities."""
    return check_before_loading(cfg)


def train(config: RunConfig | Recipe, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """Trains a run (``grouprl train``) and returns its summary (``RUN/summary.json``:
    run_dir, step, total_steps, finished, held-out accuracy before and after, and with
    ``checkpoint.keep_best`` the best validation's step, metric and value; ``stopped``
    when it ends early). A run that cannot train (a failure brake,
    ``trainer.max_idle_steps``) raises ``grouprl.CannotTrain``; its summary.json says
    why (``stopped``: kind, step, reason).

    ``config``: a ``RunConfig`` (``load_config``), or a recipe with ``overrides``. It is
    checked first, and a run that does not resume must have a run directory of its own
    (``trainer.run_dir``; ``trainer.resume=auto`` continues one). A preempted run
    (SIGTERM) raises ``grouprl.ckpt.preempt.Preempted`` after its checkpoint is saved.
    A script calls it under ``if __name__ == "__main__":`` (the workers re-import the
    script); from its top level it raises ``UnguardedMainError``.
    """
    refuse_unguarded_main("grouprl.train")
    cfg = _config(config, overrides)
    check_config(cfg)
    check_new_run(cfg)
    check_local_ray(cfg.cluster, world_size=cfg.world_size)  # cluster.nodes > 1 needs one
    from grouprl.driver.run import train as run_training

    return run_training(cfg)


def evaluate(
    target: str | PathLike,
    config: RunConfig | Recipe | None = None,
    overrides: Sequence[str] = (),
) -> dict[str, float]:
    """Scores a run's newest checkpoint, or a model (``builtin:``, a local directory or a
    hub name), on the held-out split (``grouprl eval``) and returns the metrics
    (``eval/accuracy``, ``eval/reward_mean``, ...); a run's are also written to
    ``RUN/eval.json``.

    ``config`` gives the data, rewards and sampling: by default the run directory's
    ``config.yaml``, else the ``tiny-arith`` recipe; ``overrides`` apply to it. The
    given ``RunConfig`` is not changed. Like ``train``, not from a script's top level.
    """
    refuse_unguarded_main("grouprl.evaluate")
    from grouprl.driver.eval_inputs import check_saved_rewards, check_target

    target = str(target)
    check_target(target)  # a mistyped path fails here, not as a hub lookup
    saved = Path(target) / RESOLVED_CONFIG_FILE
    from_run = config is None and saved.is_file()
    if config is None:
        config = str(saved) if from_run else DEFAULT_EVAL_RECIPE
    cfg = _config(config, overrides)
    if from_run:  # rewards the training script registered from Python
        check_saved_rewards(cfg, saved=saved)
    check_config(cfg)
    from grouprl.driver.evaluate import evaluate_cli

    return evaluate_cli(target, cfg)


def register_reward(name: str, fn: F | None = None) -> Any:
    """Makes ``fn`` the reward function ``name`` for ``reward.functions``; without ``fn``,
    a decorator (``@grouprl.register_reward("short")``). ``fn`` is called as
    ``fn(completion, reference=..., row=...)`` and returns a number
    (``grouprl.rewards.registry`` describes the contract). A name is registered once.
    ``fn`` runs in the reward worker processes, which receive it by reference: a
    module-level function of your script or an importable module, not a lambda."""
    from grouprl.rewards.registry import REWARDS

    return _register(REWARDS, name, fn)


def register_env(name: str, factory: F | None = None) -> Any:
    """Makes ``factory`` the environment ``env.name=name``; without ``factory``, a
    decorator. ``factory(env_cfg, data_cfg, *, cache_dir)`` returns an ``Environment``
    (``grouprl.envs.base``: ``episode(row)`` with ``start()`` and ``step(text)``, and
    ``template_kwargs``); it is called once per run. A name is registered once."""
    from grouprl.envs.registry import ENVS

    return _register(ENVS, name, factory)


def _register(code: UserCode, name: str, value: F | None) -> Any:
    """``code.register(name, value)``, or without ``value`` a decorator that does it."""
    if value is None:
        return lambda v: code.register(name, v)
    return code.register(name, value)


def _config(config: RunConfig | Recipe, overrides: Sequence[str]) -> RunConfig:
    """A copy of ``config`` (never changed in place), or the recipe's config."""
    if not isinstance(config, RunConfig):
        return load_config(config, overrides, check=False)
    if overrides:
        raise ConfigError(
            f"overrides={list(overrides)!r} apply to a recipe, not to a RunConfig. Fix: set "
            "the fields on the RunConfig (cfg.rollout.n = 4), or pass the recipe's name, "
            "path or mapping with the overrides."
        )
    return config.model_copy(deep=True)
