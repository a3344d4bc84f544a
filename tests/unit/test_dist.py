"""How ranks split a batch, and what `grouprl submit` sends (no Ray, no cluster)."""

from __future__ import annotations

import math
from contextlib import nullcontext
from pathlib import Path

import pytest
import torch

from grouprl.cluster.jobs import EXCLUDES, JobError, entrypoint, runtime_env
from grouprl.workers.rank import Rank


def test_each_rank_trains_its_contiguous_block_of_every_mini_batch():
    rows = [Rank(r, 2).rows(8, mini_batch_size=4).tolist() for r in range(2)]
    assert rows == [[0, 1, 4, 5], [2, 3, 6, 7]]
    assert Rank(1, 2).block(6) == slice(3, 6)
    everything = torch.cat([Rank(r, 4).rows(16, mini_batch_size=8) for r in range(4)])
    assert sorted(everything.tolist()) == list(range(16))  # each row once


def test_a_recipe_file_is_named_relative_to_the_uploaded_working_dir(tmp_path: Path):
    recipe = tmp_path / "recipes" / "mine.yaml"
    recipe.parent.mkdir()
    recipe.write_text("name: mine\n")
    command = entrypoint(str(recipe), ["train.steps=3"], working_dir=tmp_path)
    assert command == "python -m grouprl train recipes/mine.yaml train.steps=3"
    assert entrypoint("tiny-arith", [], working_dir=tmp_path).endswith("train tiny-arith")
    with pytest.raises(JobError, match="outside --working-dir"):
        entrypoint(str(recipe), [], working_dir=tmp_path / "elsewhere")


def test_runtime_env_ships_the_checkout_without_environments(tmp_path: Path):
    (tmp_path / "src" / "grouprl").mkdir(parents=True)
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("# pinned\nmy-reward-lib==1.2\n\nrapidfuzz\n")
    env = runtime_env(tmp_path, requirements)
    assert env["working_dir"] == str(tmp_path) and env["excludes"] == EXCLUDES
    assert {".venv", ".git", "runs"} <= set(env["excludes"])
    assert env["env_vars"] == {"PYTHONPATH": "src"}
    assert env["pip"] == ["my-reward-lib==1.2", "rapidfuzz"]
    with pytest.raises(JobError, match="no such file"):
        runtime_env(tmp_path, tmp_path / "missing.txt")


def _mixed_precision_rank(rank: int, world: int, init: str, out: str) -> None:
    """One rank of ``test_sharded_bf16_gathers_bf16_layers_over_float32_shards``: the roles
    built as a run builds them (rank 0 loads, FSDP2 shards), a full and a LoRA policy
    trained one step each, and what rank 0 saw written to ``out``."""
    import os

    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    from grouprl.config import load_config
    from grouprl.workers.common import autocast
    from grouprl.workers.critic import CriticWorker
    from grouprl.workers.policy import PolicyWorker
    from grouprl.workers.reference import ReferenceWorker

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    bf16 = ["model.dtype=bfloat16", "train.device=cpu"]
    cfg = load_config("tiny-arith-ppo", bf16)
    me = Rank(rank, world, "cpu")
    full = PolicyWorker(me, cfg=cfg, learning_steps=2)
    lora = PolicyWorker(
        me, cfg=load_config("tiny-arith", [*bf16, "train.lora.rank=4"]), learning_steps=2
    )
    reference = ReferenceWorker(me, cfg=cfg)  # loaded in bf16
    critic = CriticWorker(me, cfg=cfg)
    batch = _mixed_precision_batch()
    logprobs = full.logprobs(batch)
    seen = {
        "no_autocast": autocast(cfg, me) is nullcontext,
        "logprobs": logprobs,
        # LoRA's B starts at zero: the policy is the base model, bit for bit
        "reference_equal": torch.equal(reference.logprobs(batch), logprobs),
        "lora_equal": torch.equal(lora.logprobs(batch), logprobs),
        "values": critic.values(batch),
        "full": _train_once(full, batch),
        "lora": _train_once(lora, batch),
    }
    embed = full.model.get_input_embeddings().weight.detach()
    assert isinstance(embed, DTensor)
    # what a push on this path can gather: the shard cast to bf16, then all-gathered
    pushed = embed.to(torch.bfloat16).full_tensor()
    seen["push_exact"] = torch.equal(pushed, embed.full_tensor().to(torch.bfloat16))
    if rank == 0:
        torch.save(seen, out)
    dist.destroy_process_group()
    os._exit(0)  # torch 2.13's exit-time destructors abort now and then after gloo


def _train_once(worker, batch) -> dict:
    """One forward/backward on the rank's rows and one AdamW step; the dtypes each saw."""
    from grouprl.workers.fsdp import decoder_layers

    seen: dict = {"gathered": set(), "hidden": set()}

    def record(layer, args, kwargs):
        seen["gathered"].update(p.dtype for p in layer.parameters())
        seen["hidden"].add((args[0] if args else kwargs["hidden_states"]).dtype)

    hooks = [
        layer.register_forward_pre_hook(record, with_kwargs=True)
        for layer in decoder_layers(worker.model)
    ]
    mine = batch.select(worker.rank.block(len(batch)))
    with worker.autocast():  # the no-op context on this path
        logprobs_BT, _, _ = worker.scorer(
            mine.input_ids_BT, mine.attention_mask_BT, mine.loss_mask_BT
        )
    loss = -(logprobs_BT * mine.advantages_BT).sum()
    loss.backward()  # FSDP2 reduce-scatters the gradients in float32
    worker.optimizer.step()
    for hook in hooks:
        hook.remove()
    named = list(worker.model.named_parameters())
    states = worker.optimizer.state.values()
    return {
        **seen,
        "loss": loss.item(),
        "shards": {(type(p).__name__, p.dtype) for _, p in named},
        "grads": {p.grad.dtype for _, p in named if p.grad is not None},
        "trained": {".lora_" in n for n, p in named if p.grad is not None},
        "states": {t.dtype for state in states for t in state.values() if t.dim() > 0},
    }


def _mixed_precision_batch():
    from grouprl.types import TrainingBatch

    g = torch.Generator().manual_seed(0)
    B, T = 4, 10
    mask_BT = torch.zeros(B, T)
    mask_BT[:, 5:] = 1
    return TrainingBatch(
        input_ids_BT=torch.randint(0, 300, (B, T), generator=g),
        attention_mask_BT=torch.ones(B, T, dtype=torch.long),
        loss_mask_BT=mask_BT,
        turn_index_BT=torch.zeros(B, T, dtype=torch.long),
        advantages_BT=torch.randn(B, T, generator=g) * mask_BT,
        engine_logprobs_BT=torch.zeros(B, T),
    )


@pytest.mark.timeout(120)
@pytest.mark.procs
def test_sharded_bf16_gathers_bf16_layers_over_float32_shards(tmp_path: Path, tiny_model_dir):
    """model.dtype=bfloat16 on 2 FSDP2 ranks (gloo, CPU): FSDP2's mixed precision, no
    autocast. Each layer computes with bf16 weights on a bf16 residual stream; the shards,
    their gradients and AdamW's moments stay float32 (LoRA: the adapters train, the frozen
    base is gathered in bf16 too); logprobs come back float32 and agree with one float32
    process to bf16's precision. The reference (loaded in bf16) and a LoRA policy (B = 0)
    score exactly as the policy does before it trains, so the KL starts at exactly 0; the
    critic's values come back float32. A push can cast each shard to bf16 and gather that:
    the same bits as gathering float32 and casting."""
    import torch.multiprocessing as mp
    from transformers import AutoModelForCausalLM

    from grouprl.workers.logprobs import TokenScorer
    from grouprl.workers.rank import free_port

    out = tmp_path / "rank0.pt"
    init = f"tcp://127.0.0.1:{free_port()}"
    mp.spawn(_mixed_precision_rank, args=(2, init, str(out)), nprocs=2)
    seen = torch.load(out, weights_only=False)
    assert seen["no_autocast"] and seen["push_exact"]
    for policy in ("full", "lora"):
        trained = seen[policy]
        assert trained["gathered"] == {torch.bfloat16} and trained["hidden"] == {torch.bfloat16}
        assert trained["shards"] == {("DTensor", torch.float32)}
        assert trained["grads"] == {torch.float32} and trained["states"] == {torch.float32}
        assert math.isfinite(trained["loss"])
    # every weight trains in full fine-tuning; with LoRA only the adapters get gradients
    assert seen["full"]["trained"] == {False} and seen["lora"]["trained"] == {True}
    assert seen["reference_equal"] and seen["lora_equal"]
    assert seen["values"].dtype == torch.float32 and seen["values"].abs().sum() > 0
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    mine = _mixed_precision_batch().select(Rank(0, 2).block(4))  # rank 0's rows
    with torch.no_grad():
        fp32 = TokenScorer(model, chunk_tokens=1024).loss_logprobs(mine)
    assert seen["logprobs"].dtype == torch.float32
    gap = (seen["logprobs"] - fp32).abs()[mine.loss_mask_BT.bool()]
    assert 0 < gap.max() < 0.1, gap.max()  # bf16 compute, not float32, yet close


def test_one_rank_autocasts_and_float32_casts_nothing():
    """One rank builds no FSDP2, so bf16 there is torch.autocast over float32 weights;
    float32 (model.dtype=auto on CPU) is neither autocast nor an FSDP2 cast."""
    from grouprl.config import load_config
    from grouprl.workers.common import autocast, compute_dtype
    from grouprl.workers.fsdp import mixed_precision

    bf16 = load_config("tiny-arith", ["model.dtype=bfloat16", "train.device=cpu"])
    with autocast(bf16, Rank(0, 1, "cpu"))():
        assert torch.is_autocast_enabled("cpu")
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16
    fp32 = load_config("tiny-arith", ["train.device=cpu"])
    assert compute_dtype(fp32, Rank(0, 2, "cpu")) == torch.float32
    assert mixed_precision(torch.float32).param_dtype is None
    policy = mixed_precision(torch.bfloat16)
    assert (policy.param_dtype, policy.reduce_dtype) == (torch.bfloat16, torch.float32)
