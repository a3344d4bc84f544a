"""The distillation teacher: a frozen second set of engines that scores given tokens.

    student's samples (prompt + completion ids) ─► split by work over the teacher's
        replicas ─► each: vLLM prompt logprobs (``VLLMEngine.token_logprobs``), one
        forward pass (``HFEngine.token_logprobs``) or a vLLM server's prompt logprobs
        (``ServerEngine.token_logprobs``, ``teacher.server_url``) ─► the teacher's logprob
        of every completion token, joined in order

The replicas are built by the rollout's own code (``placement.start_replicas`` in Ray
actors, or ``build.make_engine`` in the driver) from the run config with the ``teacher``
section's model, engine, dtype, replica count and GPU share in place of the rollout's
(``config.teacher_checks.teacher_run_config``), so they sit where rollout replicas would:
colocated on the training GPUs (asleep while training, through ``released``), on
``rollout.gpus``, or on CPU.

Never pushed: ``Teacher`` holds its replica set privately and has no stage, apply or
update method; the run's push path reaches only the replica set the rollout builds
(``ReplicaSet.targets`` of the rollout's), and the teacher's engine handles go to no
training rank. Every call checks that each replica still serves the weights it loaded
(weight version 0), so a push that reached one anyway fails the step rather than
teaching from the student.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import torch

from grouprl.assets import resolve_model_path
from grouprl.config.schema import RunConfig
from grouprl.config.teacher_checks import teacher_run_config
from grouprl.device import resolve_device
from grouprl.engines.base import TopLogprobs
from grouprl.engines.placement import in_driver, start_replicas
from grouprl.engines.replicas import ReplicaSet, split_by_work

T = TypeVar("T")


class Teacher:
    """A frozen ``ReplicaSet`` that returns logprobs of given tokens (module docstring).
    Build it with ``make_teacher``; ``close`` stops its engines."""

    def __init__(self, replicas: ReplicaSet) -> None:
        self._replicas = replicas
        self._pool = ThreadPoolExecutor(max_workers=len(replicas), thread_name_prefix="teacher")
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._replicas)

    def token_logprobs(self, ids: list[list[int]], starts: list[int]) -> list[list[float]]:
        """For each sequence ids[i], the teacher's log-probability of ids[i][t] given
        ids[i][:t], for t in range(starts[i], len(ids[i])) (len(ids[i]) - starts[i]
        floats), at temperature 1. starts[i] >= 1. Batched across replicas: contiguous runs
        of sequences, balanced by tokens, scored at once; the result is in ``ids``' order.
        Thread-safe: calls from several threads (groups finishing in a stream) take turns."""
        return self._scatter(ids, starts, lambda engine, i, s: engine.token_logprobs(i, s))

    def top_logprobs(self, ids: list[list[int]], starts: list[int], k: int) -> list[TopLogprobs]:
        """As ``token_logprobs``, each sequence's with the ids and logprobs of the
        teacher's ``k`` most likely tokens at each of those positions (``TopLogprobs``;
        ``algo.teacher_top_k``)."""
        return self._scatter(ids, starts, lambda engine, i, s: engine.top_logprobs(i, s, k))

    def _scatter(
        self, ids: list[list[int]], starts: list[int], call: Callable[..., list[T]]
    ) -> list[T]:
        """``call(engine, ids, starts)`` over the replicas (``token_logprobs``'s checks,
        split, order and turns)."""
        if len(ids) != len(starts):
            raise ValueError(f"token_logprobs: {len(ids)} sequences but {len(starts)} starts")
        bad = [i for i, (s, b) in enumerate(zip(ids, starts, strict=True)) if not 1 <= b <= len(s)]
        if bad:
            i = bad[0]
            raise ValueError(
                f"token_logprobs: sequence {i} has start {starts[i]} for {len(ids[i])} tokens; "
                "each start must be in [1, len] (nothing predicts a sequence's first token)"
            )
        self._check_frozen()
        if not ids:
            return []
        engines = self._replicas.engines
        runs = split_by_work(ids, len(engines), max_tokens=0)

        def score(k: int) -> list[T]:
            part = slice(runs[k].start, runs[k].stop)
            return call(engines[k], ids[part], starts[part])

        with self._lock:  # an engine serves one caller at a time (the stream's groups queue)
            if len(runs) == 1:  # in the caller's thread, as the rollout's one replica is
                return score(0)
            futures = [self._pool.submit(score, k) for k in range(len(runs))]
            return [row for future in futures for row in future.result()]

    @contextmanager
    def released(self) -> Iterator[None]:
        """A block during which colocated teacher engines give their GPU memory back to
        training (as the rollout's do); a no-op elsewhere."""
        with self._replicas.released():
            yield

    def _check_frozen(self) -> None:
        pushed = [
            name
            for name, engine in zip(self._replicas.names, self._replicas.engines, strict=True)
            if engine.weight_version != 0
        ]
        if pushed:
            raise RuntimeError(
                f"the teacher's {', '.join(pushed)} received a weight push: a teacher is "
                "frozen (only the rollout's engines take the student's weights)"
            )

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._replicas.close()


def make_teacher(
    cfg: RunConfig,
    *,
    device: torch.device | None = None,
    places: list[dict] | None = None,
    cache_dir: str | Path | None = None,
) -> Teacher:
    """Starts the engines of ``cfg.teacher`` (vLLM or hf, ``teacher.engine``) where the
    rollout's would run (``teacher_run_config``) and waits for them, or connects to its
    server (``teacher.engine=server``). ``device``: the training ranks' (default:
    ``train.device`` for one rank, else the cluster's GPUs or CPU); ``places``: the
    training ranks' nodes and GPUs (``start_replicas``; none: this process's);
    ``cache_dir``: vLLM's and inductor's caches."""
    tcfg = teacher_run_config(cfg)
    if device is None:
        one_rank = cfg.world_size == 1
        gpus = cfg.cluster.gpus_per_node
        device = (
            resolve_device(cfg.train.device)
            if one_rank
            else torch.device("cuda" if gpus else "cpu")
        )
    model_dir = resolve_model_path(tcfg.model.path, key="teacher.path")
    cache = None if cache_dir is None else str(cache_dir)
    if tcfg.rollout_in_actors:
        replicas = start_replicas(
            tcfg,
            model_dir=model_dir,
            cache_dir=cache,
            places=places or [],
            on_gpu=device.type == "cuda",
        )
        replicas.names = [n.replace("rollout replica", "teacher replica") for n in replicas.names]
        for engine, name in zip(replicas.engines, replicas.names, strict=True):
            engine.name = name  # type: ignore[attr-defined]  # ActorEngine: its messages' name
        return Teacher(replicas)
    if tcfg.rollout.engine == "server":  # teacher.server_url: asked from the driver
        from grouprl.engines.server_engine import ServerEngine

        assert cfg.teacher is not None and tcfg.rollout.server_url is not None  # (checked)
        server = ServerEngine(
            tcfg.rollout.server_url,
            model_dir=str(model_dir),
            dtype=tcfg.model.dtype,
            weights_dir=tcfg.rollout.server_weights_dir,
            timeout_s=cfg.teacher.timeout_s,
            key="teacher.server_url",
        )
        return Teacher(in_driver(server, name=f"teacher server at {server.url}"))
    from transformers import AutoTokenizer

    from grouprl.engines.build import make_engine

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    engine = make_engine(
        tcfg, model_dir=model_dir, tokenizer=tokenizer, device=device, cache_dir=cache
    )
    return Teacher(in_driver(engine, name="teacher engine (in the driver)"))
