"""LoRA on the policy: merged weights serve the adapted model, the adapters off give the
base model (the KL reference), and an update trains only the adapters."""

import copy

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from grouprl.config.algo_section import AlgoConfig
from grouprl.config.train import LoraConfig, TrainConfig
from grouprl.lora_weights import merged_weights
from grouprl.types import TrainingBatch
from grouprl.workers.logprobs import TokenScorer
from grouprl.workers.lora import adapters_off, add_lora, has_lora
from grouprl.workers.optim import make_optimizer
from grouprl.workers.update import policy_update


@pytest.fixture(scope="module")
def base():
    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=61,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    )
    return Qwen2ForCausalLM(cfg).float().eval()


def _adapted(base, rank=4, alpha=8.0):
    model = add_lora(copy.deepcopy(base), LoraConfig(rank=rank, alpha=alpha))
    torch.manual_seed(1)
    with torch.no_grad():  # B starts at zero (the adapted model = the base): move it
        for name, param in model.named_parameters():
            if ".lora_B." in name:
                param.normal_(std=0.2)
    return model


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_only_the_adapters_train(base):
    model = _adapted(base)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    assert any("mlp.down_proj.lora_A" in n for n in trainable)  # all-linear
    assert not any("lm_head" in n or "embed" in n for n in trainable)
    optimizer = make_optimizer(model, TrainConfig())
    assert sum(len(g["params"]) for g in optimizer.param_groups) == len(trainable)
    assert has_lora(model) and not has_lora(base)


def test_merged_weights_serve_the_adapted_model(base):
    model = _adapted(base)
    ids = torch.randint(0, 61, (2, 9))
    state = {n: p.detach() for n, p in model.named_parameters()}
    merged = merged_weights(state, scaling=model.lora_scaling)
    assert merged.keys() == dict(base.named_parameters()).keys()
    plain = copy.deepcopy(base)
    plain.load_state_dict(merged, strict=False)
    torch.testing.assert_close(_logits(plain, ids), _logits(model, ids), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(_logits(base, ids), _logits(model, ids), atol=1e-3)
    assert merged_weights(dict(base.named_parameters()), scaling=2.0).keys() == merged.keys()


def test_adapters_off_is_the_base_model(base):
    model = _adapted(base)
    ids = torch.randint(0, 61, (2, 9))
    with adapters_off(model):
        torch.testing.assert_close(_logits(model, ids), _logits(base, ids))
    assert not torch.allclose(_logits(model, ids), _logits(base, ids), atol=1e-3)


def test_a_lora_update_moves_adapters_and_leaves_the_base(base):
    model = add_lora(copy.deepcopy(base), LoraConfig(rank=4, alpha=8.0))
    g = torch.Generator().manual_seed(3)
    B, T = 6, 10
    mask_BT = torch.zeros(B, T)
    mask_BT[:, 4:] = 1
    batch = TrainingBatch(
        input_ids_BT=torch.randint(0, 61, (B, T), generator=g),
        attention_mask_BT=torch.ones(B, T, dtype=torch.long),
        loss_mask_BT=mask_BT,
        turn_index_BT=torch.zeros(B, T, dtype=torch.long),
        advantages_BT=torch.randn(B, T, generator=g) * mask_BT,
        engine_logprobs_BT=torch.zeros(B, T),
    )
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    policy_update(
        scorer=TokenScorer(model, chunk_tokens=16),
        optimizer=make_optimizer(model, TrainConfig(lr=1e-2)),
        batch=batch,
        algo=AlgoConfig(),
        train=TrainConfig(micro_batch_size=3),
        mini_batch_size=B,
    )
    for name, param in model.named_parameters():
        moved = not torch.equal(param, before[name])
        # B leaves zero first (A's gradient is zero while B is), so the B's move
        assert moved == (".lora_B." in name), name
