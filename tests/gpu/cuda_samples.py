"""Batches for the GPU tier: arithmetic prompts, completions the tiny model sampled, and
one policy update of a copy of a model on a chosen device.

Suffixes: B rows, T tokens.
"""

from __future__ import annotations

import copy
from contextlib import nullcontext

import torch
from torch import Tensor

from grouprl.config.algo_section import AlgoConfig
from grouprl.config.train import TrainConfig
from grouprl.driver.batch import build_batch
from grouprl.engines.base import SamplingSettings
from grouprl.engines.hf_engine import HFEngine
from grouprl.types import Completion, TrainingBatch, Trajectory, Turn
from grouprl.workers.logprobs import TokenScorer
from grouprl.workers.update import policy_update

QUESTIONS = ["3 + 4", "12 + 5", "7 * 9 - 2", "100 - 37"]
CHUNK = 64  # train.logprob_chunk_tokens: several chunks per micro-batch


def render_prompts(tokenizer, questions: list[str]) -> list[list[int]]:
    texts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False
        )
        for q in questions
    ]
    return [tokenizer(t, add_special_tokens=False).input_ids for t in texts]


def trajectories(prompts: list[list[int]], groups: list[list[Completion]]) -> list[Trajectory]:
    return [
        Trajectory(prompt_index=i, prompt_ids=prompt, turns=[Turn(c)], weight_version=0)
        for i, (prompt, group) in enumerate(zip(prompts, groups, strict=True))
        for c in group
    ]


def sampled_batch(model, tokenizer, prompts: list[list[int]], *, n: int, seed: int):
    """n completions per prompt sampled by ``model`` on the CPU in float32 (the same
    tokens whichever device trains on them), with random advantages per sample."""
    engine = HFEngine(model, tokenizer, device="cpu")
    settings = SamplingSettings(group_size=n, temperature=1.0, max_tokens=32, seed=seed)
    batch = build_batch(trajectories(prompts, engine.generate(prompts, settings)), pad_id=0)
    engine.close()
    g = torch.Generator().manual_seed(seed)
    advantages_B = torch.randn(len(batch), generator=g)
    batch.advantages_BT = advantages_B[:, None] * batch.loss_mask_BT
    return batch


def update_delta(
    model,
    batch: TrainingBatch,
    *,
    device: torch.device,
    autocast=nullcontext,
    lr: float = 1e-2,
) -> tuple[Tensor, dict[str, float], torch.nn.Module]:
    """One policy update of a copy of ``model`` on ``device`` with plain SGD (the weight
    change is the clipped gradient itself, not blurred by Adam's normalisation): the
    change of every weight flattened (float32, CPU), the update's metrics, the copy."""
    trained = copy.deepcopy(model).to(device).train()
    metrics = policy_update(
        scorer=TokenScorer(trained, chunk_tokens=CHUNK),
        optimizer=torch.optim.SGD(trained.parameters(), lr=lr),
        batch=copy.deepcopy(batch).to(device),
        algo=AlgoConfig(),
        train=TrainConfig(micro_batch_size=8, logprob_chunk_tokens=CHUNK),
        mini_batch_size=len(batch),
        autocast=autocast,
    )
    delta = [
        (after.detach().cpu() - before).flatten()
        for after, before in zip(trained.parameters(), model.parameters(), strict=True)
    ]
    return torch.cat(delta), metrics, trained


def relative_error(x: Tensor, reference: Tensor) -> float:
    return float((x - reference).norm() / reference.norm())
