"""Weight decay leaves biases and norm weights out (transformers' convention, so TRL's),
for the policy, its LoRA adapters and the critic."""

import copy

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from grouprl.config.train import CriticConfig, LoraConfig, TrainConfig
from grouprl.workers.lora import add_lora
from grouprl.workers.optim import decay_param_groups, make_optimizer


@pytest.fixture(scope="module")
def qwen2():
    cfg = Qwen2Config(
        vocab_size=61,
        hidden_size=16,
        intermediate_size=24,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    return Qwen2ForCausalLM(cfg).float()


def _names(model, group) -> set[str]:
    ids = {id(p) for p in group["params"]}
    return {n for n, p in model.named_parameters() if id(p) in ids}


def test_biases_and_norm_weights_are_not_decayed(qwen2):
    opt = make_optimizer(qwen2, TrainConfig(weight_decay=0.1))
    decayed, kept = opt.param_groups
    assert (decayed["weight_decay"], kept["weight_decay"]) == (0.1, 0.0)
    assert _names(qwen2, kept) == {
        "model.layers.0.self_attn.q_proj.bias",
        "model.layers.0.self_attn.k_proj.bias",
        "model.layers.0.self_attn.v_proj.bias",
        "model.layers.0.input_layernorm.weight",
        "model.layers.0.post_attention_layernorm.weight",
        "model.norm.weight",
    }
    assert "model.embed_tokens.weight" in _names(qwen2, decayed)  # as transformers
    assert "model.layers.0.mlp.up_proj.weight" in _names(qwen2, decayed)
    assert sum(len(g["params"]) for g in opt.param_groups) == len(list(qwen2.parameters()))


def test_one_step_shrinks_only_the_decayed_weights(qwen2):
    model = copy.deepcopy(qwen2)
    opt = make_optimizer(model, TrainConfig(lr=0.5, weight_decay=0.1))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = torch.zeros_like(p)  # Adam's own step is 0: only the decay moves weights
    opt.step()
    after = dict(model.named_parameters())
    torch.testing.assert_close(after["model.norm.weight"], before["model.norm.weight"])
    torch.testing.assert_close(
        after["model.layers.0.self_attn.q_proj.bias"],
        before["model.layers.0.self_attn.q_proj.bias"],
    )
    up = "model.layers.0.mlp.up_proj.weight"
    torch.testing.assert_close(after[up], before[up] * (1 - 0.5 * 0.1))


def test_a_torch_layer_norm_is_found_by_its_type():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4, bias=False), torch.nn.LayerNorm(4))
    decayed, kept = decay_param_groups(model, weight_decay=0.1)
    assert _names(model, kept) == {"1.weight", "1.bias"}
    assert _names(model, decayed) == {"0.weight"}


def test_no_decay_keeps_one_group_in_parameter_order(qwen2):
    (group,) = decay_param_groups(qwen2, weight_decay=0.0)
    assert [id(p) for p in group["params"]] == [id(p) for p in qwen2.parameters()]


def test_lora_adapters_are_decayed(qwen2):
    model = add_lora(copy.deepcopy(qwen2), LoraConfig(rank=2, alpha=4.0))
    (group,) = make_optimizer(model, TrainConfig(weight_decay=0.1)).param_groups
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    assert _names(model, group) == trained and group["weight_decay"] == 0.1


def test_the_critic_follows_the_same_convention(qwen2):
    opt = make_optimizer(qwen2, CriticConfig(path="unused", weight_decay=0.01))
    assert [g["weight_decay"] for g in opt.param_groups] == [0.01, 0.0]
    assert "model.norm.weight" in _names(qwen2, opt.param_groups[1])
