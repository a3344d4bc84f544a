"""`grouprl train` on CUDA with the hf engine (model.dtype=auto: bf16 autocast over
float32 weights, a bf16 engine): a run stopped after 2 steps and resumed ends with the
weights of a straight 4-step run, and every step's engine/trainer logprob gap is small.

Resume equality needs run-to-run reproducible kernels: a resumed run recomputes steps 3
and 4 in a new ``train`` call, and one atomic-add ordering that differs in the last bit
can flip a sampled token later (the engine samples from bf16 logits). With
``torch.use_deterministic_algorithms`` (and CUBLAS_WORKSPACE_CONFIG, set by conftest.py)
CUDA's kernels repeat bit for bit, so the bound is the CPU test's: 1e-6.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import torch
from safetensors.torch import load_file

from grouprl.ckpt.export import find_checkpoint, part_state
from grouprl.config.loader import load_config
from grouprl.driver.run import train

ENGINE_GAP_BF16 = 0.05  # mean |engine - trainer| logprob, as in test_cuda_engine.py


def _cfg(run_dir, tiny_model_dir, device, *extra):
    return load_config(
        "tiny-arith",
        [
            f"model.path={tiny_model_dir}",
            f"train.device={device.type}",
            "model.dtype=auto",
            "rollout.engine=hf",
            "rollout.n=4",
            "rollout.max_tokens=40",
            "data.batch_size=4",
            "data.eval=null",
            "train.mini_batch_size=8",
            "train.micro_batch_size=4",
            "train.steps=4",
            "train.lr=1e-3",
            "metrics.progress=false",
            f"trainer.run_dir={run_dir}",
            *extra,
        ],
    )


def _weights(run_dir) -> dict[str, torch.Tensor]:
    return part_state(find_checkpoint(run_dir), "model")


@pytest.fixture(scope="module")
def deterministic() -> Iterator[None]:
    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    # warn_only=False: with warn_only, memory-efficient attention's backward stays on its
    # non-deterministic kernel
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(enabled, warn_only=warn_only)


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory, tiny_model_dir, cuda, deterministic):
    run_dir = tmp_path_factory.mktemp("cuda-runs") / "straight"
    summary = train(_cfg(run_dir, tiny_model_dir, cuda))
    assert summary["finished"] and summary["step"] == 4
    return run_dir


def test_a_run_resumed_on_cuda_ends_with_the_straight_runs_weights(
    straight_run, tmp_path, tiny_model_dir, cuda, deterministic
):
    run_dir = tmp_path / "resumed"
    stopped = train(_cfg(run_dir, tiny_model_dir, cuda, "trainer.stop_after=2"))
    assert stopped["step"] == 2 and not stopped["finished"]
    resumed = train(_cfg(run_dir, tiny_model_dir, cuda, "trainer.resume=auto"))
    assert resumed["step"] == 4 and resumed["finished"]
    straight, again = _weights(straight_run), _weights(run_dir)
    assert straight.keys() == again.keys()
    for name in straight:
        torch.testing.assert_close(again[name], straight[name], rtol=0, atol=1e-6, msg=name)
    shipped = load_file(f"{tiny_model_dir}/model.safetensors")
    assert any(not torch.equal(straight[k], shipped[k]) for k in shipped)  # it trained


def test_every_step_of_a_cuda_run_has_a_small_engine_logprob_gap(straight_run):
    """The bf16 engine gets each step's weights: its logprobs stay within bf16's rounding
    of the trainer's (a missed push would leave a step's gap at the policy's change)."""
    lines = [json.loads(x) for x in (straight_run / "metrics.jsonl").read_text().splitlines()]
    gaps = {x["step"]: x["engine_logprob_gap"] for x in lines if "engine_logprob_gap" in x}
    assert sorted(gaps) == [1, 2, 3, 4]
    assert all(gap < ENGINE_GAP_BF16 for gap in gaps.values()), gaps
