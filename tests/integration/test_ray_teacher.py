"""Teacher replicas in Ray actors (``engines/teacher.py`` through the rollout's
``placement.start_replicas``) on the session's 2-node Ray cluster: the sequences split
over two hf-engine replicas come back in order with the logprobs one engine in this
process gives, and every message names a teacher replica. In a file that sorts after
test_ray_cluster.py (test_ray_replicas_smoke.py explains); this process joins the cluster
and leaves it at the end."""

from __future__ import annotations

import builtins

import pytest
import torch

from grouprl.config.loader import load_config
from grouprl.engines.hf_engine import HFEngine
from grouprl.engines.teacher import make_teacher
from ray_cluster import ray_env


@pytest.mark.ray
def test_teacher_replicas_in_actors_score_as_one_engine_here(ray_cluster, tiny_model_dir, tmp_path):
    import ray
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = load_config(
        "tiny-arith",
        [
            f"teacher.path={tiny_model_dir}",
            "algo.teacher_coef=1",
            "teacher.engine=hf",
            "teacher.replicas=2",
            f"cluster.address={ray_cluster.address}",
        ],
    )
    ids = [list(range(1, 30)), list(range(40, 52)), list(range(60, 95)), [5, 6, 7]]
    starts = [10, 1, 30, 2]
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    want = HFEngine(model, tokenizer, device="cpu").token_logprobs(ids, starts)
    teacher, plain_print = None, builtins.print
    with pytest.MonkeyPatch.context() as env:
        for key, value in ray_env().items():
            env.setenv(key, value)
        try:
            teacher = make_teacher(cfg, device=torch.device("cpu"), cache_dir=tmp_path)
            assert len(teacher) == 2
            names = [engine.name for engine in teacher._replicas.engines]
            assert all(
                n.startswith(f"teacher replica {k} of 2 (node ") for k, n in enumerate(names)
            )
            got = teacher.token_logprobs(ids, starts)
            tops = teacher.top_logprobs(ids, starts, 3)  # algo.teacher_top_k, through Ray
        finally:
            if teacher is not None:
                teacher.close()
            ray.shutdown()
            builtins.print = plain_print
    assert [len(g) for g in got] == [19, 11, 5, 1]
    for g, w in zip(got, want, strict=True):
        assert g == pytest.approx(w, abs=1e-5)
    want_tops = HFEngine(model, tokenizer, device="cpu").top_logprobs(ids, starts, 3)
    for (given, top_ids, top_lps), (_, want_ids, want_lps), w in zip(
        tops, want_tops, want, strict=True
    ):
        assert given == pytest.approx(w, abs=1e-5) and top_ids == want_ids
        assert [v for row in top_lps for v in row] == pytest.approx(
            [v for row in want_lps for v in row], abs=1e-5
        )
