"""One node's share of the memory tier across nodes (``NodeStore``), and the shard files
a rank reads on resume. The whole path, with Ray ranks on 2 nodes and one node's
memory lost, is in tests/integration/test_ray_cluster.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from grouprl.ckpt.manifest import MANIFEST
from grouprl.ckpt.node_tier import TAG_ENV, NodeDir, NodeStore
from grouprl.ckpt.shards import METADATA, files_needed, load_shards, parse_metadata, save_shards
from grouprl.ckpt.state import CheckpointError

FIELDS = {"weight_version": 3, "world_size": 1, "config_hash": "c0ffee", "parts": 2}


def _state() -> dict:
    return {"model": {"w": torch.arange(6.0).reshape(2, 3)}, "optimizer": {"lr": 0.5}}


def _save_part(store: NodeStore, k: int, step: int, save_id: str = "s1") -> None:
    staging = store.begin(k, step, nbytes=1000)
    save_shards(_state(), Path(staging) / "shards")
    store.finish(staging, k, step, {"trainer.json": b"{}"}, save_id=save_id, **FIELDS)


@pytest.fixture
def on_node(monkeypatch):
    def tag(name: str) -> None:
        monkeypatch.setenv(TAG_ENV, name)

    tag("a")
    return tag


def test_a_part_is_published_with_its_manifest_and_listed(tmp_path, on_node):
    store = NodeStore(str(tmp_path), keep=2)
    _save_part(store, 1, step=4)
    [held] = store.held()
    assert (held["step"], held["part"], held["parts"], held["save_id"]) == (4, 1, 2, "s1")
    assert held["tag"] == "a" and held["weight_version"] == 3
    assert {f["path"] for f in held["files"]} == {
        "shards/.metadata",
        "shards/__0_0.distcp",
        "trainer.json",
    }
    assert store.check(1, 4) is None
    assert not list((tmp_path / "a" / "part_01").glob(".tmp-*"))  # staging renamed away


def test_a_peer_copy_is_checked_before_it_is_published(tmp_path, on_node):
    _save_part(NodeStore(str(tmp_path)), 0, step=2)
    files = NodeStore(str(tmp_path)).read(0, 2)
    assert MANIFEST in files
    on_node("b")
    peer = NodeStore(str(tmp_path))
    peer.store(0, 2, files)
    assert peer.check(0, 2) is None and [h["tag"] for h in peer.held()] == ["b"]
    damaged = dict(files) | {"trainer.json": b'{"x": 1}'}
    with pytest.raises(CheckpointError, match=r"trainer.json"):
        peer.store(0, 3, damaged)
    assert [h["step"] for h in peer.held()] == [2]  # the damaged copy is not listed


def test_a_damaged_part_is_named_and_old_steps_are_pruned(tmp_path, on_node):
    store = NodeStore(str(tmp_path), keep=2)
    for step in (1, 2, 3):
        _save_part(store, 0, step)
    assert [h["step"] for h in store.held()] == [2, 3]
    (tmp_path / "a" / "part_00" / "step_000003" / "shards" / "__0_0.distcp").write_bytes(b"x")
    assert "shards/__0_0.distcp" in store.check(0, 3)
    assert store.check(0, 2) is None


def test_a_restore_links_local_files_and_writes_fetched_ones(tmp_path, on_node):
    store = NodeStore(str(tmp_path))
    _save_part(store, 0, step=5)
    part = tmp_path / "a" / "part_00" / "step_000005"
    distcp = (part / "shards" / "__0_0.distcp").read_bytes()
    store.assemble(5, {"shards/.metadata": 0}, {"shards/__0_0.distcp": distcp})
    restored = NodeDir(str(tmp_path), "restore/step_000005").here()
    assert restored == tmp_path / "a" / "restore" / "step_000005"
    state = {"model": {"w": torch.zeros(2, 3)}, "optimizer": {"lr": 0.0}}
    load_shards(state, restored / "shards")
    torch.testing.assert_close(state["model"]["w"], _state()["model"]["w"])
    assert state["optimizer"]["lr"] == 0.5
    store.drop_restored()
    assert not restored.exists()


def test_files_needed_follow_the_load_plan(tmp_path):
    save_shards(_state(), tmp_path)
    metadata = parse_metadata((tmp_path / METADATA).read_bytes(), where=str(tmp_path))
    assert files_needed(_state(), metadata) == {"__0_0.distcp"}
    assert files_needed({"optimizer": {"lr": 0.0}}, metadata) == {"__0_0.distcp"}
    with pytest.raises(CheckpointError, match="never needs"):
        parse_metadata(b"cos\nsystem\n(S'true'\ntR.", where="crafted")
