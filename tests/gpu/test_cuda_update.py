"""Training passes on CUDA against the CPU's: the bf16-autocast step over float32
weights, padding-free packing, and LoRA, on the shipped tiny model with completions it
sampled. Suffixes: B rows, T tokens.

Tolerances come from bf16's 8-bit significand: each rounding is off by up to 2^-9
(0.2%) of the value. The tiny model is confident (entropy ~0.2 nats), so the gradient
of a likely token's logprob is 1 - p, small and made of differences; rounding the
logits moves it far more than 0.2%. On the CPU, bf16 autocast against float32 gave
update directions with cosine 0.978-0.988 and relative errors 0.16-0.21 (three
batches), packing against padding under bf16 a mean logprob difference of 0.003 (one
ulp of a logit in [8, 16) is 0.06) and a gradient 0.7% apart; CUDA's bf16 kernels
round the same way with other reduction orders. The bounds below sit several times
above those numbers and far below what a wrong gradient gives (cosine ~0, errors ~1).
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from cuda_samples import CHUNK, relative_error, sampled_batch, update_delta

from grouprl.config.algo_section import AlgoConfig
from grouprl.config.train import LoraConfig, TrainConfig
from grouprl.device import autocast_for, resolve_dtype
from grouprl.engines.base import SamplingSettings
from grouprl.engines.hf_engine import HFEngine
from grouprl.lora_weights import merged_weights
from grouprl.workers.logprobs import TokenScorer
from grouprl.workers.lora import adapters_off, add_lora
from grouprl.workers.optim import make_optimizer
from grouprl.workers.update import policy_update


@pytest.fixture(scope="module")
def batch(tiny_model, tokenizer, prompts):
    return sampled_batch(tiny_model, tokenizer, prompts, n=8, seed=1)


def test_bf16_autocast_step_on_cuda_follows_the_float32_cpu_step(tiny_model, batch, cuda):
    """model.dtype=auto on CUDA is bf16 autocast over float32 weights: the loss is finite,
    the weights stay float32 and move, and the step points where the CPU's float32 step
    does. CUDA in float32 matches the CPU closely, so what is left is bf16's rounding."""
    dtype = resolve_dtype("auto", cuda)
    assert dtype == torch.bfloat16
    bf16 = autocast_for(cuda, dtype)
    with bf16():
        assert torch.is_autocast_enabled("cuda") and torch.get_autocast_dtype("cuda") == dtype

    cpu_step, cpu_metrics, _ = update_delta(tiny_model, batch, device=torch.device("cpu"))
    fp32_step, _, _ = update_delta(tiny_model, batch, device=cuda)
    bf16_step, metrics, trained = update_delta(tiny_model, batch, device=cuda, autocast=bf16)

    assert math.isfinite(metrics["loss"]) and math.isfinite(metrics["grad_norm"])
    assert all(p.dtype == torch.float32 and p.is_cuda for p in trained.parameters())
    assert bf16_step.abs().max() > 1e-4  # the weights moved
    # float32 on CUDA: only the reduction order differs from the CPU
    assert relative_error(fp32_step, cpu_step) < 2e-3
    cosine = float(F.cosine_similarity(bf16_step, cpu_step, dim=0))
    assert cosine > 0.9, f"bf16 step vs float32 CPU step: cosine {cosine:.4f}"
    assert relative_error(bf16_step, cpu_step) < 0.5
    assert relative_error(bf16_step, cpu_step) > relative_error(fp32_step, cpu_step)  # bf16 ran
    assert metrics["entropy"] == pytest.approx(cpu_metrics["entropy"], rel=0.05)


@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
def test_packing_on_cuda_gives_the_padded_logprobs_and_gradients(
    tiny_model, batch, cuda, dtype_name
):
    """Packed rows run other attention kernels than padded ones (causal sdpa per sample,
    no mask): the same numbers up to the dtype's rounding."""
    assert batch.attention_mask_BT.sum() < batch.attention_mask_BT.numel()  # some padding
    on_gpu = batch.to(cuda)
    args = (on_gpu.input_ids_BT, on_gpu.attention_mask_BT, on_gpu.loss_mask_BT)
    autocast = autocast_for(cuda, resolve_dtype(dtype_name, cuda))
    padded_model = copy.deepcopy(tiny_model).to(cuda)
    packed_model = copy.deepcopy(tiny_model).to(cuda)
    with autocast():
        padded, _, _ = TokenScorer(padded_model, chunk_tokens=CHUNK)(*args)
        packed, _, _ = TokenScorer(packed_model, chunk_tokens=CHUNK, packed=True)(*args)
    mask = on_gpu.loss_mask_BT.bool()
    assert torch.all(packed[~mask] == 0)
    weights = torch.randn(padded.shape, generator=torch.Generator().manual_seed(0)).to(cuda)
    (padded * weights).sum().backward()
    (packed * weights).sum().backward()
    grad = lambda m: torch.cat([p.grad.flatten() for p in m.parameters()])
    gap = (packed - padded)[mask].abs()
    if dtype_name == "float32":
        assert gap.max() < 1e-4
        assert relative_error(grad(packed_model), grad(padded_model)) < 1e-4
    else:
        assert gap.mean() < 0.02, f"mean logprob gap {gap.mean():.4f}"
        assert relative_error(grad(packed_model), grad(padded_model)) < 0.05


def test_lora_on_cuda_trains_the_adapters_and_merges_for_the_engine(
    tiny_model, batch, tokenizer, prompts, cuda
):
    """An update under bf16 autocast moves only the LoRA B matrices (A's gradient is zero
    while B is); the merged weights are the adapted model, and an hf engine on CUDA given
    them samples with the adapted model's logprobs. Adapters off: the base model."""
    model = add_lora(copy.deepcopy(tiny_model), LoraConfig(rank=8, alpha=16.0)).to(cuda)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    metrics = policy_update(
        scorer=TokenScorer(model, chunk_tokens=CHUNK),
        optimizer=make_optimizer(model, TrainConfig(lr=1e-2)),
        batch=copy.deepcopy(batch).to(cuda),
        algo=AlgoConfig(),
        train=TrainConfig(micro_batch_size=8, logprob_chunk_tokens=CHUNK),
        mini_batch_size=len(batch),
        autocast=autocast_for(cuda, torch.bfloat16),
    )
    assert math.isfinite(metrics["loss"])
    for name, param in model.named_parameters():
        assert param.is_cuda, name
        assert (not torch.equal(param, before[name])) == (".lora_B." in name), name

    base = copy.deepcopy(tiny_model).to(cuda)
    merged = merged_weights(
        {n: p.detach() for n, p in model.named_parameters()}, scaling=model.lora_scaling
    )
    assert merged.keys() == dict(base.named_parameters()).keys()
    plain = copy.deepcopy(base)
    plain.load_state_dict(merged, strict=False)
    ids = batch.input_ids_BT.to(cuda)

    def logits(m):
        with torch.no_grad():
            return m(input_ids=ids).logits

    # float32 on CUDA: W x + s B A x and (W + s B A) x differ by reduction order only (an
    # H200 put 2 of 647904 logits 3.0e-4 apart, 7.0e-4 relative; an H100 kept them in 1e-4)
    torch.testing.assert_close(logits(plain), logits(model), rtol=1e-3, atol=1e-3)
    assert not torch.allclose(logits(base), logits(model), atol=1e-3)  # the adapters act
    with adapters_off(model):
        torch.testing.assert_close(logits(model), logits(base))

    engine = HFEngine(base, tokenizer, device=cuda)
    engine.update_weights(merged.items(), version=1)
    settings = SamplingSettings(group_size=4, temperature=1.0, max_tokens=24, seed=5)
    groups = engine.generate(prompts, settings)
    for prompt, group in zip(prompts, groups, strict=True):
        for c in group:
            full = torch.tensor([prompt + c.token_ids], device=cuda)
            with torch.no_grad():
                logp = model(input_ids=full).logits[0, len(prompt) - 1 : -1].float()
            picked = logp.log_softmax(-1).gather(1, torch.tensor(c.token_ids, device=cuda)[:, None])
            assert (picked[:, 0].cpu() - torch.tensor(c.logprobs)).abs().max() < 1e-3
