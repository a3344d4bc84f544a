"""Checkpoint shards do not tie a run to its world size: model and optimizer state saved
by 2 FSDP2 workers (gloo, CPU) load into 1 plain process, and back."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.checkpoint.state_dict import set_state_dict
from torch.distributed.fsdp import fully_shard

from grouprl.ckpt.resume import training_state
from grouprl.ckpt.shards import load_shards, save_shards

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


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def _train_step(model, optimizer) -> None:
    torch.manual_seed(1)
    model(torch.randn(6, 8)).square().mean().backward()
    optimizer.step()
    optimizer.zero_grad()


def _sharded(rank: int, world: int, init: str):
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    model = _model()
    for layer in (model[0], model[2]):
        fully_shard(layer)
    fully_shard(model)
    return model, torch.optim.AdamW(model.parameters(), lr=0.1)


def _save_on_two(rank: int, world: int, init: str, out: str) -> None:
    model, optimizer = _sharded(rank, world, init)
    _train_step(model, optimizer)
    save_shards(training_state(model=model, optimizer=optimizer), Path(out))
    dist.destroy_process_group()
    _exit_worker()


def _load_on_two(rank: int, world: int, init: str, src: str, result: str) -> None:
    model, optimizer = _sharded(rank, world, init)
    state = training_state(model=model, optimizer=optimizer)
    load_shards(state, Path(src))
    set_state_dict(
        model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"]
    )
    full = {k: v.full_tensor() for k, v in model.state_dict().items()}
    moments = {
        name: optimizer.state[p]["exp_avg"].full_tensor() for name, p in model.named_parameters()
    }
    if rank == 0:
        torch.save({"model": full, "exp_avg": moments}, result)
    dist.destroy_process_group()
    _exit_worker()


def _plain_trained():
    model = _model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    _train_step(model, optimizer)
    return model, optimizer


def test_two_workers_save_one_loads(tmp_path):
    mp.spawn(_save_on_two, args=(2, _tcp_init(), str(tmp_path / "c")), nprocs=2)
    reference, ref_opt = _plain_trained()
    model = _model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    state = training_state(model=model, optimizer=optimizer)
    load_shards(state, tmp_path / "c")
    set_state_dict(
        model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"]
    )
    for (name, a), b in zip(reference.named_parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(a, b, msg=name)
        torch.testing.assert_close(ref_opt.state[a]["exp_avg"], optimizer.state[b]["exp_avg"])


def test_one_worker_saves_two_load(tmp_path):
    reference, ref_opt = _plain_trained()
    save_shards(training_state(model=reference, optimizer=ref_opt), tmp_path / "c")
    result = tmp_path / "loaded.pt"
    mp.spawn(
        _load_on_two,
        args=(2, _tcp_init(), str(tmp_path / "c"), str(result)),
        nprocs=2,
    )
    loaded = torch.load(result, weights_only=True)
    for name, param in reference.named_parameters():
        torch.testing.assert_close(loaded["model"][name], param.detach(), msg=name)
        torch.testing.assert_close(loaded["exp_avg"][name], ref_opt.state[param]["exp_avg"])
