"""The checks before anything loads, with the run's inputs: ``plan.check_run`` (config,
batch arithmetic, memory) plus the data files, reward functions and environment, so a
wrong column, reward name or environment path fails in about a second, not after the
policy loads and the engine starts.

Imports no torch, vllm, ray or ``datasets`` (``grouprl plan`` stays light); a user's
reward module and environment class are imported, as the run would.
"""

from __future__ import annotations

from grouprl.assets import model_path_problem
from grouprl.config.checks import Derived, close_function
from grouprl.config.imports import is_import_path
from grouprl.config.schema import RunConfig
from grouprl.config.teacher_checks import teacher_problems
from grouprl.data.peek import source_problems
from grouprl.envs.loader import env_config_problems
from grouprl.plan.check import check_run
from grouprl.rewards.data_checks import verl_row_problems
from grouprl.rewards.graders import grader_problems
from grouprl.rewards.judge_checks import judge_problems
from grouprl.rewards.registry import REWARD_FUNCTIONS, reward_problems
from grouprl.rewards.reward_model_checks import reward_model_problems
from grouprl.rollout.gateway.worker import agent_problems
from grouprl.rollout.row_checks import answer_fields, row_findings
from grouprl.sandbox.isolation import isolation_problems


def check_before_loading(cfg: RunConfig, *, missing_ok: bool = False) -> Derived:
    """``check_run`` with ``input_problems`` listed among the config's problems; raises
    one ``ConfigError`` naming all of them. Returns the derived quantities."""
    return check_run(cfg, inputs=input_problems(cfg, missing_ok=missing_ok))


def input_problems(
    cfg: RunConfig, *, missing_ok: bool = False, notes: list[str] | None = None
) -> list[str]:
    """Reward functions that do not resolve, cannot reach the reward workers (a lambda, a
    notebook's ``__main__``), have a signature no call style takes, args they do not take,
    or need more than ``reward.sandbox.timeout_s`` per call (``reward_problems``),
    and data sources that would not load (a local file missing, unreadable, or without the
    prompt or answer column), and rows that would not train (``rollout/row_checks.py``:
    tests code_tests cannot read, fewer rows than a batch, every prompt too long), as
    messages.
    ``missing_ok``: files and modules absent on this machine are left to the machine that
    runs the job (``grouprl submit``; its ``grouprl train`` checks them at start).
    ``notes``: the rows' counts and prompt lengths are appended to it (``grouprl plan``)."""
    problems = env_config_problems(cfg.env, missing_ok=missing_ok)  # env.name, env.args
    problems += agent_problems(cfg.env, missing_ok=missing_ok)  # env.agent
    problems += reward_problems(
        cfg.reward.functions, missing_ok=missing_ok, timeout_s=cfg.reward.sandbox.timeout_s
    )
    problems += reward_model_problems(  # reward_model entries: docs/reward-models.md
        cfg.reward.functions, policy=cfg.model.path, missing_ok=missing_ok
    )
    problems += judge_problems(cfg, missing_ok=missing_ok)  # llm_judge entries: docs/judges.md
    problems += correct_function_typo(cfg)
    problems += grader_problems(cfg.reward.functions, cfg.data, missing_ok=missing_ok)
    problems += verl_row_problems(cfg.reward.functions, cfg.data, missing_ok=missing_ok)
    problems += model_path_problems(cfg, missing_ok=missing_ok)
    problems += teacher_problems(cfg, missing_ok=missing_ok)  # teacher.*: docs/distillation.md
    if not missing_ok:  # (the job's machine may allow namespaces this one refuses)
        problems += isolation_problems(cfg)  # *.sandbox.require_isolation
    sources = []
    for key, source in (("data.train", cfg.data.train), ("data.eval", cfg.data.eval)):
        if source is not None:
            sources += source_problems(
                source,
                config_key=key,
                data=cfg.data,
                missing_ok=missing_ok,
                answer_fields=answer_fields(cfg),
            )
    if not sources:  # the rows themselves, once the sources read
        rows = row_findings(cfg)
        sources = rows.problems
        if notes is not None:
            notes += rows.notes
    return problems + sources


def correct_function_typo(cfg: RunConfig) -> list[str]:
    """``reward.correct_function`` a typo away from a listed function's name (the case
    ``config.checks`` leaves here): when that name resolves, the typo is
    ``correct_function``'s; when it does not, ``reward_problems`` names the unknown
    function with the registered names, and this adds nothing."""
    names = [f.name for f in cfg.reward.functions]
    close = close_function(cfg.reward.correct_function, names)
    if close is None or not (close in REWARD_FUNCTIONS or is_import_path(close)):
        return []
    return [
        f"reward.correct_function={cfg.reward.correct_function!r} is not one of the "
        f"reward.functions ({', '.join(names)}). Did you mean reward.correct_function="
        f"{close}? It names the function whose score of 1.0 counts as a correct answer, "
        "for the `accuracy` metrics; reward.correct_function=null logs none."
    ]


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
