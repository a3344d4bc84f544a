"""The teacher section of ``grouprl plan`` (a run with a ``teacher:`` section only): the
model, its engine and replicas, where they run and their memory, read off the rollout's
rows for the config the teacher's engines are built from
(``config.teacher_checks.teacher_run_config``), with the keys that set them named. No
torch.
"""

from __future__ import annotations

from grouprl.config.errors import show
from grouprl.config.schema import RunConfig
from grouprl.config.teacher_checks import teacher_run_config
from grouprl.plan.rollout_rows import rollout_rows
from grouprl.plan.rows import Row
from grouprl.plan.target import Target

# the rollout's keys the teacher section replaces, as the rollout rows name them
_KEYS = {
    "rollout.gpu_memory_utilization": "teacher.gpu_memory_utilization",
    "rollout.replicas=null": "teacher.replicas=null: as many as the rollout's",
}


def teacher_rows(cfg: RunConfig, target: Target) -> list[Row]:
    """Model, engine, replicas, placement and memory of the teacher's engines; none
    without a teacher."""
    teacher = cfg.teacher
    if teacher is None:
        return []
    tcfg = teacher_run_config(cfg)
    rows: list[Row] = [
        (
            "model",
            teacher.path,
            f"dtype {tcfg.model.dtype} (teacher.dtype={show(teacher.dtype)}); frozen: it "
            "scores the student's samples, one prefill per sample, and never takes a push",
        )
    ]
    if teacher.engine == "server":  # the rollout's server rows speak of weight pushes
        where = f"a vLLM server of the teacher at {teacher.server_url} (teacher.server_url)"
        return [
            *rows,
            ("engine", "server", f"{where}: prompt logprobs of given tokens, nothing pushed"),
            ("replicas", "1", "the server (teacher.engine=server); no memory of this run's"),
        ]
    for quantity, value, how in rollout_rows(tcfg, target):
        if quantity == "replica call limit":  # the rollout's generation bound: not a teacher's
            continue
        if quantity == "engine":
            how = how.replace("transformers generate", "a transformers forward pass")
            how += f" (teacher.engine={show(teacher.engine)}): logprobs of given tokens"
        if quantity == "replicas":  # teacher_run_config sets the rollout's count
            how = "teacher.replicas" if teacher.replicas else _KEYS["rollout.replicas=null"]
        for rollout_key, teacher_key in _KEYS.items():
            how = how.replace(rollout_key, teacher_key)
        rows.append((quantity, value, how))
    return rows
