"""Config-time checks of ``llm_judge`` entries (``driver/preflight.input_problems``),
before anything loads, in about two seconds at most (one GET to a judge server):

    url, path     neither or both; ``model`` missing with ``url``
    url           ``reward.network: false`` (the workers have no network then); the server
                  does not answer ``GET {url}/models`` within ``PROBE_S`` (the error named);
                  ``model`` not among the models it serves
    path          a local path that does not exist or holds no config.json; an unknown
                  ``builtin:`` name
    template      none; no ``{completion}``; a field that is not a plain name or is
                  neither ``completion``, ``reference`` nor a column of ``data.train``
    parse         labels / pattern / range that do not fit it, a pattern that does not
                  compile or has other than one group, YAML's bare yes/no

Each message names ``reward.functions.<i>.args.<key>``, the value, what is allowed and the
fix. A hub name that is not downloaded cannot be read here: its workers' first calls fail
(reward failures) if it does not load there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grouprl.assets import BUILTIN_PREFIX, ModelPathError, model_path_problem, resolve_model_path
from grouprl.config.served import PROBE_S, served_models
from grouprl.data.peek import source_columns
from grouprl.rewards.args import with_args
from grouprl.rewards.judge import SAMPLE_FIELDS, LLMJudge, template_fields

if TYPE_CHECKING:
    from grouprl.config.schema import RunConfig


def judge_problems(cfg: RunConfig, *, missing_ok: bool = False) -> list[str]:
    """Why each ``llm_judge`` entry of ``reward.functions`` would not judge, as messages.
    ``missing_ok``: the job's machine, not this one, reaches the server and has the files
    (``grouprl submit``): the server and paths go unchecked."""
    from grouprl.rewards.registry import REWARD_FUNCTIONS

    problems = []
    for i, entry in enumerate(cfg.reward.functions):
        fn = REWARD_FUNCTIONS.get(entry.name)
        if not isinstance(fn, LLMJudge):
            continue
        try:
            judge = with_args(fn, dict(entry.args))
        except (TypeError, ValueError):  # reward_problems names the bad args
            continue
        key = f"reward.functions.{i}.args"
        found = [f"{key}.{p} (llm_judge: docs/judges.md)" for p in judge.setting_problems()]
        if not found:
            found = _field_problems(judge, cfg, key=key, missing_ok=missing_ok)
            found += _where_problems(judge, cfg, key=key, missing_ok=missing_ok)
        problems += found
    return problems


def _field_problems(judge: LLMJudge, cfg: RunConfig, *, key: str, missing_ok: bool) -> list[str]:
    """Template fields that are neither the sample's nor a column of ``data.train``."""
    columns = source_columns(cfg.data.train, missing_ok=missing_ok)
    if columns is None:  # not readable here: source_problems says why, or the job's machine
        return []
    allowed = [*SAMPLE_FIELDS, *sorted(c for c in columns if not c.startswith("_"))]
    return [
        f"{key}.template uses {{{name}}}, which is neither a sample's field nor a column of "
        f"data.train ({cfg.data.train.source}); allowed fields: "
        f"{', '.join('{' + a + '}' for a in allowed)}. Fix: use one of them (write a "
        "literal brace as {{ or }})"
        for name in template_fields(judge.template)
        if name not in allowed
    ]


def _where_problems(judge: LLMJudge, cfg: RunConfig, *, key: str, missing_ok: bool) -> list[str]:
    """The judge out of the workers' reach: a url without ``reward.network``, one that
    does not answer or does not serve ``model``; a local path that is not a model."""
    if judge.path is not None:
        if missing_ok:
            return []
        path_key = f"{key}.path"
        if judge.path.startswith(BUILTIN_PREFIX):
            try:
                resolve_model_path(judge.path, key=path_key)
            except ModelPathError as err:
                return [str(err)]
            return []
        problem = model_path_problem(judge.path, key=path_key)
        return [] if problem is None else [problem]
    if not cfg.reward.network:
        return [
            f"{key}.url={judge.url!r} with reward.network=false: the reward workers run "
            "with no network (not even loopback), so every request would fail. Allowed: "
            "reward.network=true with a url, or a local judge (path). Fix: set "
            f"reward.network=true (the workers may then reach any host), or replace "
            f"{key}.url with {key}.path"
        ]
    return [] if missing_ok else _probe(judge, key=key)


def _probe(judge: LLMJudge, *, key: str) -> list[str]:
    """``GET {url}/models`` within ``PROBE_S``: refused when it fails or lacks ``model``."""
    url = f"{(judge.url or '').rstrip('/')}/models"
    served = served_models(url)
    if isinstance(served, str):
        return [
            f"{key}.url={judge.url!r}: GET {url} did not answer within {PROBE_S:g}s as an "
            f"OpenAI-compatible server does ({served}). Allowed: the "
            "base URL of a running OpenAI-compatible server (ending in /v1). Fix: start "
            f"the judge server (`vllm serve MODEL`), or correct {key}.url"
        ]
    if judge.model not in served:
        return [
            f"{key}.model={judge.model!r} is not served at {judge.url} (GET {url}: "
            f"{served}). Fix: set {key}.model to one of those"
        ]
    return []
