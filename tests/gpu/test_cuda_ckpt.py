"""Checkpoints of CUDA tensors: staging copies them into pinned host buffers (reused
from save to save) that the writer thread saves while training goes on, and a restore
puts the same bits back on the GPU."""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from grouprl.ckpt.checkpointer import Checkpointer
from grouprl.ckpt.resume import load_training, training_state
from grouprl.ckpt.snapshot import stage
from grouprl.ckpt.state import TrainerState, rng_state
from grouprl.config.ckpt import CheckpointConfig
from grouprl.device import autocast_for


def test_staging_copies_cuda_tensors_into_reused_pinned_host_buffers(cuda):
    state = {
        "w": torch.arange(6.0, device=cuda),
        "nested": [{"m": torch.full((2, 3), 0.5, device=cuda, dtype=torch.bfloat16)}, 5],
        "lr": 0.1,
    }
    staged, nbytes = stage(state)
    assert nbytes == 6 * 4 + 6 * 2 and staged["lr"] == 0.1 and staged["nested"][1] == 5
    pairs = [(staged["w"], state["w"]), (staged["nested"][0]["m"], state["nested"][0]["m"])]
    for host, live in pairs:
        assert host.device.type == "cpu" and host.is_pinned() and host.dtype == live.dtype
        assert torch.equal(host, live.cpu())
    state["w"].add_(1)  # the loop goes on; the snapshot does not move
    assert torch.equal(staged["w"], torch.arange(6.0))
    again, _ = stage(state, staged)
    assert again["w"] is staged["w"] and again["w"].is_pinned()
    assert torch.equal(again["w"], torch.arange(6.0) + 1)


def _train_step(model, optimizer, *, seed: int, device: torch.device) -> None:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, model.config.vocab_size, (4, 24), generator=g).to(device)
    with autocast_for(device, torch.bfloat16)():
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()


def test_a_checkpoint_of_a_cuda_model_and_adamw_restores_them_bit_for_bit(
    tiny_model, tmp_path, cuda
):
    """The save holds the state at the step it was asked for, though the model trains on
    while the writer thread saves it; the restore fills another model and optimizer on
    the GPU with exactly those values."""
    model = copy.deepcopy(tiny_model).to(cuda)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    _train_step(model, optimizer, seed=0, device=cuda)
    ckpt = Checkpointer(
        CheckpointConfig(), run_dir=tmp_path / "run", run_name="cuda", config_hash="abc"
    )
    trainer = TrainerState(
        step=1,
        weight_version=1,
        sampler={},
        scheduler={},
        rng=rng_state(),
        eval_before={},
    )
    saved = ckpt.save(
        1,
        state=lambda: training_state(model=model, optimizer=optimizer),
        trainer=trainer,
        files={},
        final=True,
    )
    assert saved
    expected = {n: p.detach().clone() for n, p in model.named_parameters()}
    moments = {n: optimizer.state[p]["exp_avg_sq"].clone() for n, p in model.named_parameters()}
    _train_step(model, optimizer, seed=1, device=cuda)  # while the writer may still be saving
    ckpt.wait()
    (found,) = ckpt.newest()

    fresh = copy.deepcopy(tiny_model).to(cuda)
    fresh_optimizer = torch.optim.AdamW(fresh.parameters(), lr=1e-3)
    _train_step(fresh, fresh_optimizer, seed=2, device=cuda)  # states to overwrite
    restored = load_training(Path(found.where), model=fresh, optimizer=fresh_optimizer)
    assert restored.step == 1
    for name, param in fresh.named_parameters():
        assert param.is_cuda and torch.equal(param, expected[name]), name
        state = fresh_optimizer.state[param]
        assert state["exp_avg_sq"].is_cuda and torch.equal(state["exp_avg_sq"], moments[name])
        assert float(state["step"]) == 1.0
    assert not torch.equal(next(model.parameters()), next(fresh.parameters()))  # it moved on
    ckpt.close()
