"""The ``teacher`` section's checks before anything loads (``driver/preflight.py``): an
engine it cannot use, a teacher no loss term reads, a path that is no model, and, from
the two models' tokenizer files, another vocabulary or other end-of-answer tokens than the
student's; a teacher whose context is shorter than a sample; a teacher server that does not
answer (``teacher.server_url``). No torch; reads small JSON files and asks a teacher server
one GET. Also ``teacher_run_config``, the config the teacher's engines are built and
planned from (``engines/teacher.py``, ``plan/``)."""

from __future__ import annotations

from grouprl.assets import model_path_problem
from grouprl.assets.tokenizers import end_token_ids, max_positions, vocab_difference
from grouprl.config.errors import show
from grouprl.config.schema import RunConfig
from grouprl.config.served import PROBE_S, served_models
from grouprl.config.teacher import TeacherConfig


def teacher_problems(cfg: RunConfig, *, missing_ok: bool = False) -> list[str]:
    """What keeps ``cfg.teacher`` from teaching, as messages naming the key, the value,
    what is allowed and the fix: an engine it cannot use, a teacher no term of the loss
    reads (``algo.teacher_coef`` 0), a path that is no model, another tokenizer, other
    end-of-answer tokens. Reads ``tokenizer.json`` and friends of local and ``builtin:``
    models only (a hub name is not checked here); ``missing_ok``: paths absent on this
    machine are left to the job's."""
    teacher = cfg.teacher
    if teacher is None:
        return []
    problems = []
    if teacher.engine is None and cfg.rollout.engine == "server":
        problems.append(
            "teacher.engine=null takes rollout.engine='server', whose server serves the "
            "student: the teacher scores with an engine of its own. Set teacher.engine=vllm "
            "(prompt logprobs), teacher.engine=hf, or teacher.engine=server with "
            "teacher.server_url (a vLLM server of the teacher)."
        )
    problems += _server_problems(teacher, missing_ok=missing_ok)
    if cfg.algo.teacher_coef == 0:
        fix = (
            "Set algo.teacher_coef > 0 (the distill preset's 1.0)"
            if cfg.algo.name == "distill"
            else "Set algo.name=distill (on-policy distillation), or algo.teacher_coef > 0 to "
            "add the teacher's term to this algorithm's task reward"
        )
        problems.append(
            f"teacher.path={show(teacher.path)} starts a teacher, but algo.teacher_coef=0 "
            f"(algo.name={cfg.algo.name}) gives it no term in the loss. {fix}, or teacher=null."
        )
    where = (
        "a teacher reads the student's token ids: give a model with the student's "
        "tokenizer (model.path's), such as builtin:tiny-arith-teacher for builtin:tiny-arith."
    )
    allowed = (
        "give an existing model directory (holding config.json), a hub name, or "
        "builtin:tiny-arith-teacher (the shipped student after GRPO)."
    )
    found = model_path_problem(teacher.path, key="teacher.path", allowed=allowed)
    if not missing_ok and found is not None:
        return [*problems, found]
    if (differ := vocab_difference(teacher.path, cfg.model.path)) is not None:
        problems.append(
            f"teacher.path={show(teacher.path)} has another tokenizer than model.path="
            f"{show(cfg.model.path)} ({differ}): its logprobs would be of other tokens than "
            f"the student sampled. Fix: {where}"
        )
    elif (end := _end_token_problem(cfg)) is not None:
        problems.append(end)
    need = cfg.rollout.max_model_len + 1  # teacher_run_config's: a full sample and one more
    if (positions := max_positions(teacher.path)) is not None and positions < need:
        problems.append(
            f"teacher.path={show(teacher.path)} reads {positions} positions at most "
            f"(config.json's max_position_embeddings), and scoring the student's samples "
            f"needs rollout.max_model_len + 1 = {need}: a sample longer than {positions - 1} "
            "tokens would fail mid-run (vLLM refuses it; transformers would read positions "
            f"the teacher never learned). Fix: a teacher with a context of {need} tokens or "
            f"more, or rollout.max_model_len={positions - 1} or less."
        )
    return problems


def _server_problems(teacher: TeacherConfig, *, missing_ok: bool) -> list[str]:
    """``teacher.server_url`` without ``teacher.engine=server`` or the other way round,
    more than one replica of a server, and a server that does not answer ``GET
    {server_url}/v1/models`` within ``PROBE_S`` (not asked with ``missing_ok``: a job's
    server is reached from its cluster)."""
    url = teacher.server_url
    if teacher.engine != "server":
        if url is None:
            return []
        return [
            f"teacher.server_url={show(url)} is read only with teacher.engine=server, and "
            f"teacher.engine={show(teacher.engine)}. Fix: set teacher.engine=server to score "
            "with that server, or teacher.server_url=null."
        ]
    if not url:
        return [
            "teacher.engine=server needs teacher.server_url: the base URL of a vLLM server "
            "of the teacher (e.g. http://teacher-node:8000, from `vllm serve "
            f"{show(teacher.path)}`). Fix: set teacher.server_url, or teacher.engine=vllm or "
            "hf to start the teacher here."
        ]
    problems = []
    if teacher.replicas not in (None, 1):
        problems.append(
            f"teacher.replicas={teacher.replicas} with teacher.engine=server: every score "
            "is asked of the one server at teacher.server_url, so it allows 1 replica. Fix: "
            "teacher.replicas=1 (or null)."
        )
    models = f"{url.rstrip('/')}/v1/models"
    if not missing_ok and isinstance(served := served_models(models), str):
        problems.append(
            f"teacher.server_url={show(url)}: GET {models} did not answer within "
            f"{PROBE_S:g}s as a vLLM server does ({served}). Allowed: the base URL of a "
            f"running vLLM server of the teacher (no /v1). Fix: start it (`vllm serve "
            f"{show(teacher.path)}`), or correct teacher.server_url."
        )
    return problems


def _end_token_problem(cfg: RunConfig) -> str | None:
    """Teacher and student ending answers with different tokens (refused unless
    ``teacher.allow_other_end_tokens``); None when they agree or either cannot be read."""
    assert cfg.teacher is not None
    teacher, student = end_token_ids(cfg.teacher.path), end_token_ids(cfg.model.path)
    if teacher is None or student is None or teacher == student:
        return None
    if cfg.teacher.allow_other_end_tokens:
        return None
    return (
        f"teacher.path={show(cfg.teacher.path)} ends its answers with token(s) "
        f"{sorted(teacher)}, the student (model.path={show(cfg.model.path)}) with "
        f"{sorted(student)}: the teacher gives the student's end token a low probability, "
        "so distillation teaches the student never to stop (a length collapse). Fix: use a "
        "teacher of the student's chat format (the same end-of-answer token, e.g. the "
        "instruct model of the student's family, or its generation_config.json's "
        "eos_token_id set to the student's), or set teacher.allow_other_end_tokens=true "
        "if the teacher does score the student's end token as its own."
    )


def teacher_run_config(cfg: RunConfig) -> RunConfig:
    """The config the teacher's engines are built from: ``cfg`` with ``model.path`` (no
    revision), ``model.dtype``, ``rollout.engine``, ``rollout.replicas`` and
    ``rollout.gpu_memory_utilization`` taken from ``teacher`` (the placement keys stay the
    rollout's), no segments, and ``rollout.max_model_len`` one more than the rollout's:
    vLLM refuses a prompt as long as its context, and a student's sample may fill it."""
    teacher = cfg.teacher
    if teacher is None:
        raise ValueError("the run config has no teacher: section")
    replicas = teacher.replicas or cfg.rollout_replicas
    out = cfg.model_copy(deep=True)
    out.teacher = None
    out.model.path = teacher.path
    out.model.revision = None  # the student's hub revision is not the teacher's
    out.model.dtype = teacher.dtype or cfg.model.dtype
    engine = teacher.engine or cfg.rollout.engine
    out.rollout.engine = engine
    out.rollout.replicas = replicas
    out.rollout.gpu_memory_utilization = teacher.gpu_memory_utilization
    out.rollout.max_model_len = cfg.rollout.max_model_len + 1
    out.rollout.partial_rollout_tokens = None
    if engine == "server":  # scored in the driver, by the server at teacher.server_url
        out.rollout.server_url = teacher.server_url
        out.rollout.replicas = 1
    return out
