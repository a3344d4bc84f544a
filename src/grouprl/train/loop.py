"""The training loop: algorithm-blind orchestration of one step after another.

sampler ─► prompt rows ─► engine.generate (weights v) ─► rewards
                                                          │
    advantages (algo registry) ◄──────────────────────────┘
          │
          ▼
TrainingBatch ─► [reference logprobs if beta > 0] ─► policy_update
          │                                             │
          │                      engine.update_weights (v + 1) ◄─┘
          ▼
metrics sinks / samples.jsonl / checkpoint / validation every N steps
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch

from grouprl.algo.advantages import ADVANTAGES
from grouprl.config.schema import RunConfig
from grouprl.data.sampler import PromptSampler
from grouprl.evaluate import validate
from grouprl.rewards.scoring import metrics as reward_metrics
from grouprl.rollout.base import RolloutEngine, SamplingSettings
from grouprl.rollout.runner import ScoreFn, collect
from grouprl.train.batch import build_batch
from grouprl.train.setup import PromptSet
from grouprl.train.update import batch_logprobs, policy_update
from grouprl.types import Trajectory


@dataclass
class Components:
    """Everything the loop needs, built by ``train.run``."""

    cfg: RunConfig
    tokenizer: Any
    policy: torch.nn.Module
    reference: torch.nn.Module | None
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    engine: RolloutEngine
    train_set: PromptSet
    eval_set: PromptSet | None
    sampler: PromptSampler
    score: ScoreFn
    mini_batch_size: int
    total_steps: int
    autocast: Any = nullcontext
    weight_version: int = 0
    step: int = 0


def sampling_seed(seed: int, step: int) -> int:
    """Distinct per (run seed, step); sample j of prompt i adds i * n + j (engines)."""
    return (seed * 1_000_003 + step) * 100_000 % (2**31 - 1)


def rollout_step(c: Components, step: int) -> tuple[list[Trajectory], dict[str, float]]:
    cfg = c.cfg
    prompt_set = c.train_set.take(c.sampler.next_batch(cfg.data.batch_size))
    settings = SamplingSettings(
        n=cfg.rollout.n,
        temperature=cfg.rollout.temperature,
        top_p=cfg.rollout.top_p,
        top_k=cfg.rollout.top_k,
        max_tokens=cfg.rollout.max_tokens,
        seed=sampling_seed(cfg.train.seed, step),
        ignore_eos=cfg.rollout.ignore_eos,
    )
    t0 = time.perf_counter()
    timed_score = _timed(c.score)
    trajectories, scores = collect(
        engine=c.engine,
        prompts=prompt_set.prompts,
        rows=prompt_set.rows,
        settings=settings,
        score=timed_score,
        correct_function=cfg.reward.correct_function,
    )
    total = time.perf_counter() - t0
    lengths = [len(t.completion.token_ids) for t in trajectories]
    rewards = torch.tensor([t.reward for t in trajectories])
    metrics = {
        "reward/mean": float(rewards.mean()),
        "reward/std": float(rewards.std(unbiased=False)),
        "accuracy": sum(t.correct for t in trajectories) / len(trajectories),
        "response_len/mean": sum(lengths) / len(lengths),
        "response_len/max": float(max(lengths)),
        "response/truncated_frac": sum(t.completion.finish_reason == "length" for t in trajectories)
        / len(trajectories),
        "time/reward_s": timed_score.seconds,
        "time/generate_s": total - timed_score.seconds,
        "tokens_per_s": sum(lengths) / max(total - timed_score.seconds, 1e-9),
        **reward_metrics(scores),
    }
    return trajectories, metrics


def train_step(c: Components, trajectories: list[Trajectory]) -> dict[str, float]:
    cfg = c.cfg
    rewards_PG = torch.tensor([t.reward for t in trajectories]).view(-1, cfg.rollout.n)
    advantages_PG = ADVANTAGES[cfg.algo.advantage](rewards_PG, cfg=cfg.algo)
    batch = build_batch(
        trajectories, advantages_PG.flatten().tolist(), pad_id=c.tokenizer.pad_token_id
    )
    device = next(c.policy.parameters()).device
    batch = batch.to(device)
    if c.reference is not None:
        batch.ref_logprobs_BT = batch_logprobs(
            c.reference,
            batch,
            micro_batch_size=cfg.train.micro_batch_size,
            chunk_tokens=cfg.train.logprob_chunk_tokens,
            autocast=c.autocast,
        )
    metrics = policy_update(
        model=c.policy,
        optimizer=c.optimizer,
        batch=batch,
        algo=cfg.algo,
        train=cfg.train,
        mini_batch_size=c.mini_batch_size,
        autocast=c.autocast,
    )
    metrics["lr"] = c.optimizer.param_groups[0]["lr"]
    c.scheduler.step()
    metrics["zero_adv_groups_frac"] = float((rewards_PG.std(dim=1) == 0).float().mean())
    return metrics


def sync_weights(c: Components) -> None:
    c.weight_version += 1
    c.engine.update_weights(c.policy.named_parameters(), version=c.weight_version)


def run_validation(c: Components) -> dict[str, float]:
    if c.eval_set is None or len(c.eval_set) == 0:
        return {}
    return validate(
        engine=c.engine,
        prompt_set=c.eval_set,
        score=c.score,
        rollout=c.cfg.rollout,
        correct_function=c.cfg.reward.correct_function,
        seed=c.cfg.train.seed,
    )


def one_step(c: Components, step: int) -> tuple[list[Trajectory], dict[str, float]]:
    """Generate, score, update, sync: training step ``step`` (1-based)."""
    t0 = time.perf_counter()
    trajectories, metrics = rollout_step(c, step)
    t1 = time.perf_counter()
    c.policy.train()
    metrics.update(train_step(c, trajectories))
    t2 = time.perf_counter()
    sync_weights(c)
    t3 = time.perf_counter()
    metrics.update({"time/train_s": t2 - t1, "time/weight_sync_s": t3 - t2, "time/step_s": t3 - t0})
    metrics["weight_version"] = float(c.weight_version)
    c.step = step
    return trajectories, metrics


class _timed:
    """Wraps the score function to measure the seconds spent in it."""

    def __init__(self, fn: ScoreFn) -> None:
        self.fn, self.seconds = fn, 0.0

    def __call__(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - t0
