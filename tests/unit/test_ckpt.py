"""The checkpoint format and the local tiers: manifests, safe DCP metadata, staging,
retention, leftovers, the asynchronous writer and resume's fallback."""

from __future__ import annotations

import pickle
import threading
import time
from pathlib import Path

import pytest
import torch

from grouprl.ckpt.checkpointer import Checkpointer
from grouprl.ckpt.manifest import MANIFEST, read_manifest, verify
from grouprl.ckpt.resume import find_resume, load_training, training_state
from grouprl.ckpt.shards import SafeReader, load_shards, save_shards
from grouprl.ckpt.snapshot import SHARDS, stage
from grouprl.ckpt.state import CheckpointError, TrainerState, rng_state, set_rng_state
from grouprl.ckpt.tiers import LocalTier
from grouprl.config.ckpt import CheckpointConfig


def _model_and_optimizer(seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Linear(5, 3))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.randn(4, 6)).square().sum().backward()
    optimizer.step()
    return model, optimizer


def _trainer(step: int) -> TrainerState:
    return TrainerState(
        step=step,
        weight_version=step,
        sampler={"epoch": 0, "position": step},
        scheduler={"last_epoch": step},
        rng=rng_state(),
        eval_before={"eval/accuracy": 0.5},
        algo={"kl_coef": 0.01},
    )


def _checkpointer(tmp_path: Path, **cfg) -> Checkpointer:
    return Checkpointer(
        CheckpointConfig.model_validate(cfg),
        run_dir=tmp_path / "run",
        run_name="t",
        config_hash="abc",
    )


def _save(ckpt: Checkpointer, model, optimizer, step: int, **kw) -> bool:
    return ckpt.save(
        step,
        state=lambda: training_state(model=model, optimizer=optimizer),
        trainer=_trainer(step),
        files={"hf/config.json": b"{}"},
        **kw,
    )


def test_checkpoint_round_trip_restores_model_optimizer_and_state(tmp_path):
    model, optimizer = _model_and_optimizer()
    ckpt = _checkpointer(tmp_path)
    assert _save(ckpt, model, optimizer, 7, final=True)
    ckpt.wait()
    (found,) = ckpt.newest()
    assert (found.tier, found.step) == ("disk", 7)
    manifest = verify(Path(found.where))
    assert manifest.step == 7 and manifest.world_size == 1 and manifest.config_hash == "abc"
    assert {f["path"] for f in manifest.files} >= {"trainer.json", "hf/config.json"}

    fresh, fresh_opt = _model_and_optimizer(seed=1)
    state = load_training(Path(found.where), model=fresh, optimizer=fresh_opt)
    assert state.step == 7 and state.algo == {"kl_coef": 0.01}
    for a, b in zip(model.parameters(), fresh.parameters(), strict=True):
        assert torch.equal(a, b)
    for a, b in zip(optimizer.state.values(), fresh_opt.state.values(), strict=True):
        assert torch.equal(a["exp_avg_sq"], b["exp_avg_sq"]) and float(a["step"]) == float(
            b["step"]
        )
    ckpt.close()


def test_rng_state_round_trips_through_json():
    state = rng_state()
    expected = (torch.rand(3), torch.randint(0, 10**6, (1,)).item())
    import json

    set_rng_state(json.loads(json.dumps(state)))
    assert torch.equal(torch.rand(3), expected[0])
    assert torch.randint(0, 10**6, (1,)).item() == expected[1]


def test_staging_copies_and_reuses_host_buffers():
    state = {"w": torch.ones(3), "nested": [{"m": torch.zeros(2)}, 5], "lr": 0.1}
    staged, nbytes = stage(state)
    assert nbytes == 5 * 4 and staged["lr"] == 0.1 and staged["nested"][1] == 5
    state["w"].add_(1)  # the loop goes on; the snapshot does not move
    assert torch.equal(staged["w"], torch.ones(3))
    again, _ = stage(state, staged)
    assert again["w"] is staged["w"] and torch.equal(again["w"], torch.full((3,), 2.0))


def test_a_damaged_file_fails_verification(tmp_path):
    model, optimizer = _model_and_optimizer()
    ckpt = _checkpointer(tmp_path)
    _save(ckpt, model, optimizer, 1, final=True)
    ckpt.wait()
    path = Path(ckpt.newest()[0].where)
    (path / "trainer.json").write_text("{}")
    with pytest.raises(CheckpointError, match=r"trainer.json"):
        verify(path)
    ckpt.close()


def test_resume_falls_back_to_an_older_checkpoint_when_the_newest_is_damaged(tmp_path):
    model, optimizer = _model_and_optimizer()
    ckpt = _checkpointer(tmp_path, disk={"every": 1, "keep": 3})
    for step in (1, 2, 3):
        _save(ckpt, model, optimizer, step)
        ckpt.wait()
    newest = Path(ckpt.newest()[0].where)
    shard = next((newest / SHARDS).glob("*.distcp"))
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte: a bad disk, a torn copy
    shard.write_bytes(bytes(data))
    found = find_resume("auto", ckpt, restore_dir=tmp_path / "restore")
    assert found.manifest.step == 2
    assert find_resume("never", ckpt, restore_dir=tmp_path) is None
    ckpt.close()


def test_leftovers_of_an_interrupted_save_are_ignored_and_removed(tmp_path):
    root = tmp_path / "run" / "checkpoints"
    (root / ".tmp-step_000009" / SHARDS).mkdir(parents=True)  # killed while writing
    (root / "step_000008").mkdir()  # killed before its manifest: not a checkpoint
    tier = LocalTier("disk", root, every=None, keep=2)
    assert tier.complete() == []  # listing reads, never removes (a save may be running)
    assert (root / ".tmp-step_000009").exists()
    tier.remove_leftovers()  # the run that owns the tier, when it starts
    assert not (root / ".tmp-step_000009").exists() and tier.complete() == []


def test_retention_keeps_the_newest_per_tier(tmp_path):
    model, optimizer = _model_and_optimizer()
    ckpt = _checkpointer(
        tmp_path,
        memory={"every": 1, "keep": 1, "dir": str(tmp_path / "shm")},
        disk={"every": 2, "keep": 2},
    )
    for step in range(1, 6):
        _save(ckpt, model, optimizer, step)
        ckpt.wait()
    assert [(f.tier, f.step) for f in ckpt.newest()] == [("memory", 5), ("disk", 4), ("disk", 2)]
    metrics = ckpt.drain_metrics()
    assert metrics["ckpt/blocking_s"] > 0 and metrics["ckpt/memory_bytes"] > 0
    ckpt.close()


def test_memory_budget_drops_old_copies_and_skips_what_cannot_fit(tmp_path, caplog):
    model, optimizer = _model_and_optimizer()
    shm = tmp_path / "shm"
    ckpt = _checkpointer(tmp_path, memory={"every": 1, "keep": 5, "dir": str(shm), "max_gb": 1e-9})
    _save(ckpt, model, optimizer, 1)
    ckpt.wait()
    assert ckpt.newest() == [] and "skips the memory tier" in caplog.text
    assert not list(tmp_path.rglob("step_*"))  # and it is not written anywhere else
    ckpt.close()


def test_a_save_due_while_the_writer_is_busy_is_skipped_or_waits(tmp_path, monkeypatch, caplog):
    import grouprl.ckpt.checkpointer as module

    model, optimizer = _model_and_optimizer()
    release = threading.Event()
    real = module.write_checkpoint

    def slow(*args, **kwargs):
        release.wait(10)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "write_checkpoint", slow)
    ckpt = _checkpointer(tmp_path, disk={"every": 1, "keep": 5}, on_busy="skip")
    started = time.perf_counter()
    assert _save(ckpt, model, optimizer, 1)
    assert time.perf_counter() - started < 5  # the loop did not wait for the write
    assert not _save(ckpt, model, optimizer, 2)
    assert "skipped" in caplog.text
    release.set()
    ckpt.wait()
    assert [f.step for f in ckpt.newest()] == [1]
    ckpt.cfg.on_busy = "wait"
    release.clear()
    assert _save(ckpt, model, optimizer, 3)
    threading.Timer(1.0, release.set).start()
    assert _save(ckpt, model, optimizer, 4)  # waits for step 3's write, then goes on
    ckpt.wait()
    assert [f.step for f in ckpt.newest()] == [4, 3, 1]
    assert "waited" in caplog.text
    ckpt.close()


def test_dcp_metadata_that_would_run_code_is_refused(tmp_path):
    save_shards({"model": {"w": torch.ones(2)}}, tmp_path / SHARDS)

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    (tmp_path / SHARDS / ".metadata").write_bytes(pickle.dumps(Evil()))
    with pytest.raises(CheckpointError, match=r"builtins.print"):
        SafeReader(tmp_path / SHARDS).read_metadata()
    with pytest.raises(CheckpointError):
        load_shards({"model": {"w": torch.zeros(2)}}, tmp_path / SHARDS)


def test_manifest_is_written_last(tmp_path):
    model, optimizer = _model_and_optimizer()
    ckpt = _checkpointer(tmp_path)
    _save(ckpt, model, optimizer, 3, final=True)
    ckpt.wait()
    path = Path(ckpt.newest()[0].where)
    manifest_time = (path / MANIFEST).stat().st_mtime_ns
    assert all(p.stat().st_mtime_ns <= manifest_time for p in path.rglob("*") if p.is_file())
    assert read_manifest(path).bytes == sum(
        p.stat().st_size for p in path.rglob("*") if p.is_file() and p.name != MANIFEST
    )
    ckpt.close()


def test_an_unwritable_tier_directory_is_named_with_its_key(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(CheckpointError, match=r"checkpoint.memory.dir: cannot use"):
        _checkpointer(tmp_path, memory={"every": 1, "dir": str(blocker)})


def test_moved_trainer_keys_name_their_new_place():
    from grouprl.config.errors import ConfigError
    from grouprl.config.loader import load_config

    with pytest.raises(ConfigError, match=r"trainer.save_every .* moved to checkpoint.disk.every"):
        load_config("tiny-arith", ["trainer.save_every=5"])


def test_a_run_with_a_critic_refuses_a_checkpoint_without_one(tmp_path):
    model, optimizer = _model_and_optimizer()
    ckpt = _checkpointer(tmp_path)
    _save(ckpt, model, optimizer, 1, final=True)
    ckpt.wait()
    ckpt.close()
    critic, critic_optimizer = _model_and_optimizer(seed=2)
    with pytest.raises(CheckpointError, match="has no critic"):
        load_training(
            Path(ckpt.newest()[0].where),
            model=model,
            optimizer=optimizer,
            critic=critic,
            critic_optimizer=critic_optimizer,
        )
