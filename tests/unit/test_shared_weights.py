"""The weight-push buffer: layout, a second mapping seeing the writes, all-or-nothing checks."""

from __future__ import annotations

import itertools
import os

import pytest
import torch

from grouprl.engines import shared_weights
from grouprl.engines.shared_weights import SharedWeights, map_layout, plan_layout, reserve_file

EXPECTED = {
    "model.embed_tokens.weight": (10, 4),
    "model.norm.weight": (4,),
    "model.layers.0.mlp.up_proj.weight": (6, 4),
    "lm_head.weight": (10, 4),
}


def weights(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        name: torch.randn(shape, generator=g)
        for name, shape in EXPECTED.items()
        if name != "lm_head.weight"
    }


@pytest.fixture
def buffer():
    shared = SharedWeights(dict(EXPECTED), dtype=torch.bfloat16, tied=True, engine="test")
    other = map_layout(shared.path, shared.layout, shared.size)  # what a worker maps
    shared.unlink()
    return shared, other


def test_layout_is_aligned_and_disjoint():
    layout, size = plan_layout(EXPECTED, torch.float32)
    spans = sorted(
        (offset, offset + 4 * torch.Size(shape).numel()) for _, _, shape, offset in layout
    )
    assert all(offset % shared_weights.ALIGN == 0 for offset, _ in spans)
    assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans))
    assert spans[-1][1] <= size


def test_a_fill_is_seen_through_another_mapping_cast_and_with_the_tied_head(buffer):
    shared, worker_views = buffer
    for seed in (0, 1):  # the buffer is reused push after push
        given = weights(seed)
        shared.fill(given.items())
        for name, tensor in given.items():
            assert worker_views[name].dtype == torch.bfloat16
            assert torch.equal(worker_views[name], tensor.to(torch.bfloat16))
        assert torch.equal(
            worker_views["lm_head.weight"], worker_views["model.embed_tokens.weight"]
        )


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda w: w.pop("model.norm.weight"), r"missing \['model.norm.weight'\]"),
        (lambda w: w.update(extra=torch.zeros(2)), r"unknown \['extra'\]"),
        (
            lambda w: w.update({"model.norm.weight": torch.zeros(5)}),
            r"model.norm.weight: got \(5,\), expected \(4,\)",
        ),
    ],
)
def test_an_incomplete_push_raises_naming_the_weights(buffer, edit, message):
    shared, _ = buffer
    given = weights(0)
    edit(given)
    with pytest.raises(ValueError, match=message):
        shared.fill(given.items())


def test_a_weight_given_twice_raises(buffer):
    shared, _ = buffer
    given = list(weights(0).items())
    with pytest.raises(ValueError, match="given twice"):
        shared.fill(given + given[:1])


def test_the_file_is_gone_after_unlink_and_the_mapping_stays(buffer):
    shared, worker_views = buffer
    assert shared.path is None
    shared.fill(weights(2).items())
    assert worker_views["model.norm.weight"].float().abs().sum() > 0


def test_no_room_is_a_clear_error(monkeypatch, tmp_path):
    def full(fd, offset, size):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    monkeypatch.setattr(shared_weights.tempfile, "tempdir", str(tmp_path))
    with pytest.raises(OSError, match=r"no room for the .* weight-push buffer.*--shm-size"):
        reserve_file(1 << 20, prefix="grouprl-test-")
    assert list(tmp_path.iterdir()) == []


FUSED_LAYER = {
    "model.layers.0.self_attn.q_proj.weight": (8, 4),
    "model.layers.0.self_attn.k_proj.weight": (2, 4),
    "model.layers.0.self_attn.v_proj.weight": (2, 4),
    "model.layers.0.self_attn.q_proj.bias": (8,),
    "model.layers.0.self_attn.k_proj.bias": (2,),
    "model.layers.0.self_attn.v_proj.bias": (2,),
    "model.layers.0.self_attn.o_proj.weight": (4, 8),
    "model.layers.0.mlp.gate_proj.weight": (6, 4),
    "model.layers.0.mlp.up_proj.weight": (6, 4),
    "model.layers.0.mlp.down_proj.weight": (4, 6),
}


def test_fused_parts_lie_back_to_back_in_vllms_row_order():
    """vLLM fuses q, k, v (and gate, up) into one matrix in that row order: laid out so,
    the lean reload repacks the fused weight from a view of the buffer, with no copy."""
    from grouprl.engines.vllm_cpu_reload import Packed, fused_weight

    layout, size = plan_layout(FUSED_LAYER, torch.float32)
    offset = {name: off for name, _, _, off in layout}
    prefix = "model.layers.0."
    for parts in (
        ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"],
        ["mlp.gate_proj", "mlp.up_proj"],
    ):
        for suffix in ("weight", "bias") if "q_proj" in parts[0] else ("weight",):
            names = [f"{prefix}{p}.{suffix}" for p in parts]
            ends = [offset[n] + 4 * torch.Size(FUSED_LAYER[n]).numel() for n in names]
            assert [offset[n] for n in names[1:]] == ends[:-1]  # no gap between the parts
            assert offset[names[0]] % shared_weights.ALIGN == 0
    path = reserve_file(size, prefix="grouprl-test-")
    try:
        views = map_layout(path, layout, size)
    finally:
        os.unlink(path)
    for view in views.values():
        view.copy_(torch.randn(view.shape))
    names = [f"{prefix}self_attn.{p}_proj.weight" for p in "qkv"]
    entry = Packed(torch.nn.Module(), [(n, 0, views[n].shape[0]) for n in names], (12, 4))
    fused = fused_weight(views, entry)
    assert fused.data_ptr() == views[names[0]].data_ptr()  # a view: nothing copied
    assert torch.equal(fused, torch.cat([views[n] for n in names]))


def test_a_tied_head_shares_the_embeddings_bytes():
    shared = SharedWeights(dict(EXPECTED), dtype=torch.float32, tied=True, engine="test")
    shared.unlink()
    _untied, size = plan_layout(EXPECTED, torch.float32)
    assert shared.size < size  # the head's 10 x 4 floats are not stored twice
    head, embeddings = shared.views["lm_head.weight"], shared.views["model.embed_tokens.weight"]
    assert head.data_ptr() == embeddings.data_ptr()
    assert shared.nbytes == sum(4 * torch.Size(s).numel() for s in EXPECTED.values()) - 4 * 40
    shared.fill(weights(3).items())
    assert torch.equal(head, weights(3)["model.embed_tokens.weight"])
