"""The checks before anything loads, with the run's inputs: ``plan.check_run`` (config,
batch arithmetic, memory) plus the data files, reward functions and environment, so a
wrong column, reward name or environment path fails in about a second, not after the
policy loads and the engine starts.

Imports no torch, vllm, ray or ``datasets`` (``grouprl plan`` stays light); a user's
reward module and environment class are imported, as the run would.
"""

from __future__ import annotations

from grouprl.assets import model_path_problem
from grouprl.config.checks import Derived
from grouprl.config.schema import RunConfig
from grouprl.data.peek import source_problems
from grouprl.envs.loader import env_config_problems
from grouprl.plan.check import check_run
from grouprl.rewards.graders import grader_problems
from grouprl.rewards.registry import reward_problems
from grouprl.rollout.gateway.worker import agent_problems


def check_before_loading(cfg: RunConfig, *, missing_ok: bool = False) -> Derived:
    """``check_run`` with ``input_problems`` listed among the config's problems; raises
    one ``ConfigError`` naming all of them. Returns the derived quantities."""
    return check_run(cfg, inputs=input_problems(cfg, missing_ok=missing_ok))


def input_problems(cfg: RunConfig, *, missing_ok: bool = False) -> list[str]:
    """Reward functions that do not resolve, cannot reach the reward workers (a lambda, a
    notebook's ``__main__``), have a signature no call style takes, args they do not take,
    or need more than ``reward.sandbox.timeout_s`` per call (``reward_problems``),
    and data sources that would not load (a local file missing, unreadable, or without the
    prompt or answer column), as messages.
    ``missing_ok``: files and modules absent on this machine are left to the machine that
    runs the job (``grouprl submit``; its ``grouprl train`` checks them at start)."""
    problems = env_config_problems(cfg.env, missing_ok=missing_ok)  # env.name, env.args
    problems += agent_problems(cfg.env, missing_ok=missing_ok)  # env.agent
    problems += reward_problems(
        cfg.reward.functions, missing_ok=missing_ok, timeout_s=cfg.reward.sandbox.timeout_s
    )
    problems += grader_problems(cfg.reward.functions, cfg.data, missing_ok=missing_ok)
    problems += model_path_problems(cfg, missing_ok=missing_ok)
    for key, source in (("data.train", cfg.data.train), ("data.eval", cfg.data.eval)):
        if source is not None:
            problems += source_problems(
                source, config_key=key, data=cfg.data, missing_ok=missing_ok
            )
    return problems


def model_path_problems(cfg: RunConfig, *, missing_ok: bool = False) -> list[str]:
    """``model.path`` and ``critic.path`` values that look like local paths but are no
    model directory here (``assets.path_reason``): they would otherwise become hub
    lookups. ``missing_ok``: the job's machine may have them."""
    if missing_ok:
        return []
    paths = {"model.path": cfg.model.path}
    if cfg.critic is not None:
        paths["critic.path"] = cfg.critic.path
    found = (model_path_problem(path, key=key) for key, path in paths.items())
    return [problem for problem in found if problem is not None]
