"""World size 2 == world size 1 for one policy update: two FSDP2 ranks (gloo, CPU), each
training on its block of the mini-batch with the mini-batch's loss denominators and
summed gradients, end with the parameters and metrics of one process (SGD, lr 1, so the
parameter change is the clipped gradient itself)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from transformers import AutoModelForCausalLM

from grouprl.config.algo_section import AlgoConfig
from grouprl.config.train import LoraConfig, TrainConfig
from grouprl.types import TrainingBatch
from grouprl.workers.fsdp import shard
from grouprl.workers.logprobs import TokenScorer
from grouprl.workers.lora import add_lora
from grouprl.workers.optim import states_on_host
from grouprl.workers.rank import Rank
from grouprl.workers.update import policy_update

pytestmark = pytest.mark.timeout(300)


def _exit_worker() -> None:
    """Ends a spawned rank without interpreter teardown: torch 2.13's exit-time C++
    destructors abort ("terminate called without an active exception") in about one
    exit in five after a gloo group was used, which would fail the test for nothing."""
    import os

    os._exit(0)


def _tcp_init() -> str:
    # a TCP store on loopback: the file:// store aborted a rank at exit now and then
    from grouprl.workers.rank import free_port

    return f"tcp://127.0.0.1:{free_port()}"


LENGTHS = [12, 7, 12, 9, 5, 12, 8, 12]
"""Row lengths of the packed case: with 20 tokens per pass, rank 0's block of the first
mini-batch (12 + 7) fits one pass and rank 1's (12 + 9) needs two, so rank 0 splits."""


def _batch(packed: bool) -> TrainingBatch:
    g = torch.Generator().manual_seed(0)
    B, T = 8, 12
    attention_BT = torch.ones(B, T, dtype=torch.long)
    if packed:
        for row, n in enumerate(LENGTHS):
            attention_BT[row, n:] = 0
    mask_BT = torch.zeros(B, T)
    mask_BT[:, 6:] = 1
    mask_BT[3] = 0  # a row without loss tokens: its rank still runs its backward
    mask_BT *= attention_BT
    return TrainingBatch(
        input_ids_BT=torch.randint(0, 300, (B, T), generator=g) * attention_BT,
        attention_mask_BT=attention_BT,
        loss_mask_BT=mask_BT,
        turn_index_BT=torch.zeros(B, T, dtype=torch.long),
        advantages_BT=torch.randn(B, T, generator=g) * mask_BT,
        engine_logprobs_BT=torch.zeros(B, T),
    )


def _update(rank: int, world: int, model_dir: str, out: str, init: str, mode: str) -> None:
    if world > 1:
        dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    packed = mode == "packed"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if mode == "lora":
        add_lora(model, LoraConfig(rank=4, alpha=8.0))
        torch.manual_seed(0)  # the same adapters on every rank and in the one process
        with torch.no_grad():
            for name, param in model.named_parameters():
                if ".lora_" in name:
                    param.normal_(std=0.1)
    scorer = TokenScorer(model, chunk_tokens=1024, packed=packed)
    train = TrainConfig(micro_batch_size=1, max_grad_norm=1.0)
    if packed:
        train = TrainConfig(micro_batch_tokens=20, packing=True, max_grad_norm=1.0)
    if world > 1:
        shard(scorer, model, offload=False)
    trained = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(trained, lr=1.0)
    if mode == "adamw_on_host":  # cluster.offload_optimizer: sharded moments move each step
        optimizer = torch.optim.AdamW(trained, lr=1e-2, eps=1e-3)
        states_on_host(optimizer)
    metrics = policy_update(
        scorer=scorer,
        optimizer=optimizer,
        batch=_batch(packed),
        algo=AlgoConfig(num_iterations=2),  # old logprobs of each rank's rows
        train=train,
        mini_batch_size=4,  # 2 mini-batches, each split over the ranks
        rank=Rank(rank, world, "cpu"),
    )
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    state = get_model_state_dict(model, options=options) if world > 1 else model.state_dict()
    if rank == 0:
        torch.save({"state": state, "metrics": metrics}, out)
    if world > 1:
        dist.destroy_process_group()
        _exit_worker()


@pytest.mark.parametrize("mode", ["padded", "packed", "lora", "adamw_on_host"])
def test_two_fsdp_ranks_update_like_one_process(tmp_path: Path, tiny_model_dir: str, mode):
    """packed: a token budget per pass; lora: frozen base and adapters in one FSDP unit;
    adamw_on_host: AdamW whose sharded moments are copied to and from the host each step."""
    one, two = tmp_path / "one.pt", tmp_path / "two.pt"
    _update(0, 1, tiny_model_dir, str(one), "", mode)
    init = _tcp_init()
    mp.spawn(_update, args=(2, tiny_model_dir, str(two), init, mode), nprocs=2)
    a, b = torch.load(one), torch.load(two)
    assert b["metrics"] == pytest.approx(a["metrics"], rel=1e-5)
    assert a["metrics"]["grad_norm"] > 1.0  # clipping engaged: the norm is global
    initial = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
    for name, value in a["state"].items():
        # float sums in another order: packed passes differ in shape between the runs,
        # and LoRA's B @ A products carry each rank's rounding into both factors
        atol = {"padded": 1e-6, "packed": 2e-6, "lora": 5e-5, "adamw_on_host": 1e-5}[mode]
        close = torch.testing.assert_close
        close(b["state"][name], value, rtol=0, atol=atol, msg=lambda m, n=name: f"{n}: {m}")
        if mode != "lora":
            assert not torch.equal(value, initial[name]), f"{name} did not move"
        elif ".base_layer." in name:  # frozen under LoRA
            assert torch.equal(value, initial[name.replace(".base_layer.", ".")]), name
