"""The hf rollout engine on CUDA: its sampled-token logprobs against the trainer's
(``engine_logprob_gap``), and seeded sampling on the GPU's generators.

The engine holds its own copy of the weights in the run's dtype (``_build_hf``); the
trainer keeps float32 weights and, for bf16, computes under autocast. In float32 both
compute the same function by other kernels (a KV-cached decode against one full pass):
on the CPU the gap is ~3e-7 on average and 6e-6 at most, the bound is 1e-4 / 1e-3, and
stale weights show as >= 1e-2. In bf16 the engine's residual stream is bf16 where the
trainer's is float32, and each logit is rounded to 8 bits: on the CPU the mean gap was
0.007 (largest 0.17, on an unlikely token); the bound is 0.05 on the mean.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch
from cuda_samples import CHUNK, trajectories

from grouprl.device import autocast_for, resolve_dtype
from grouprl.driver.batch import build_batch
from grouprl.engines.base import SamplingSettings
from grouprl.engines.hf_engine import HFEngine
from grouprl.workers.logprobs import TokenScorer

GAP_BOUNDS = {"float32": (1e-4, 1e-3), "bfloat16": (0.05, None)}  # (mean, largest)


@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
def test_hf_engine_logprobs_on_cuda_match_the_trainers(
    tiny_model, tokenizer, prompts, cuda, dtype_name
):
    dtype = resolve_dtype(dtype_name, cuda)
    policy = copy.deepcopy(tiny_model).to(cuda)  # float32 master weights
    engine = HFEngine(policy, tokenizer, device=cuda, dtype=dtype)
    assert next(engine.model.parameters()).dtype == dtype
    settings = SamplingSettings(group_size=8, temperature=1.0, max_tokens=32, seed=3)
    groups = engine.generate(prompts, settings)
    batch = build_batch(trajectories(prompts, groups), pad_id=0).to(cuda)
    with torch.no_grad(), autocast_for(cuda, dtype)():
        trainer_BT, _, _ = TokenScorer(policy, chunk_tokens=CHUNK)(
            batch.input_ids_BT, batch.attention_mask_BT, batch.loss_mask_BT
        )
    mask = batch.loss_mask_BT.bool()
    gap = (trainer_BT.float() - batch.engine_logprobs_BT)[mask].abs()
    assert mask.sum() >= 4 * 8  # at least one token per completion
    mean_bound, max_bound = GAP_BOUNDS[dtype_name]
    assert gap.mean() < mean_bound, f"{dtype_name}: mean gap {gap.mean():.2e}"
    if max_bound is not None:
        assert gap.max() < max_bound, f"{dtype_name}: largest gap {gap.max():.2e}"
    engine.close()


def test_seeded_sampling_on_cuda_repeats_and_ignores_batching(tiny_model, tokenizer, prompts, cuda):
    """Sample j of prompt i draws from a CUDA generator seeded seed + i * n + j: the same
    call gives the same tokens, and a prompt alone (its seed shifted) gives its tokens in
    the batch. In float32: a prompt alone runs other kernel shapes than the batch, and
    bf16's rounding of the logits would let near-ties in the race go either way."""
    engine = HFEngine(tiny_model, tokenizer, device=cuda, dtype=torch.float32)
    settings = SamplingSettings(group_size=3, temperature=1.0, max_tokens=24, seed=11)
    tokens = lambda groups: [[c.token_ids for c in g] for g in groups]
    first = tokens(engine.generate(prompts, settings))
    assert tokens(engine.generate(prompts, settings)) == first
    alone = tokens(engine.generate([prompts[2]], replace(settings, seed=11 + 2 * 3)))
    assert alone[0] == first[2]
    assert tokens(engine.generate(prompts, replace(settings, seed=12))) != first
    engine.close()
