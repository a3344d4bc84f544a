"""A step's rollout side: one round generated, scored (the teacher's logprobs asked, in
distillation) and judged (``generate_round``, what every ``RolloutSource`` calls), and the
batch taken with its metrics (``take_batch``).
Sample shapes: B samples (prompts x ``rollout.n``)."""

from __future__ import annotations

import time

import torch

from grouprl.algo.shaping import overlong_penalty, signal_groups
from grouprl.driver.components import Components
from grouprl.driver.source import Generated, RoundStats
from grouprl.engines.base import SamplingSettings
from grouprl.rewards.scoring import RewardScores
from grouprl.rewards.scoring import metrics as reward_metrics
from grouprl.rollout.episodes import episode_metrics
from grouprl.rollout.reward import record_parts
from grouprl.seeds import step_seed
from grouprl.types import Trajectory

FAILURE_METRICS = {
    "env_error": "failures/env",
    "agent_error": "failures/agent",
    "reward_error": "failures/reward",
}
"""The metric that counts each step's samples failed for each reason (dropped or not)."""


def generate_round(c: Components, rows: list[int], index: int, attempt: int = 0) -> Generated:
    """One round: the prompts at ``rows`` x ``rollout.n`` samples, seeded as round
    ``attempt`` of step ``index + 1`` (``grouprl.seeds``), scored and shaped, with dynamic
    sampling's verdict per group."""
    cfg = c.cfg
    t0 = time.perf_counter()
    c.score.seconds = c.score.hidden = 0.0
    if c.teacher is not None:
        c.teacher.seconds = c.teacher.hidden = 0.0
    c.engine.drain_metrics()  # what validation generated is not this round's
    settings = SamplingSettings(
        group_size=cfg.rollout.n,
        temperature=cfg.rollout.temperature,
        top_p=cfg.rollout.top_p,
        top_k=cfg.rollout.top_k,
        max_tokens=cfg.rollout.max_tokens,
        seed=step_seed(cfg.train.seed, index + 1, attempt),
        ignore_eos=cfg.rollout.ignore_eos,
    )
    trajectories, scores = c.rollout(c.train_set.take(rows), settings)
    if cfg.algo.overlong_buffer is not None:
        for t in trajectories:
            penalty = overlong_penalty(
                len(t.completion.token_ids),
                max_tokens=cfg.rollout.max_tokens,
                buffer=cfg.algo.overlong_buffer,
                factor=cfg.algo.overlong_penalty,
            )
            record_parts(t, overlong=penalty)
    teacher_s = teacher_hidden_s = 0.0
    if c.teacher is not None:  # its logprobs, per group, of the samples not asked yet
        c.teacher(trajectories, group_size=cfg.rollout.n)  # (the stream asks as groups end)
        teacher_s, teacher_hidden_s = c.teacher.seconds, c.teacher.hidden
    reward_s, hidden_s = c.score.seconds, c.score.hidden  # hidden: scored while generating
    held = (reward_s - hidden_s) + (teacher_s - teacher_hidden_s)  # the round waited for
    generate_s = time.perf_counter() - t0 - held
    replicas = c.engine.drain_metrics()
    stats = RoundStats(
        trajectories,
        [scores],
        generate_s,
        reward_s,
        replicas,
        teacher_s=teacher_s,
        reward_hidden_s=hidden_s,
        teacher_hidden_s=teacher_hidden_s,
    )
    n = cfg.rollout.n
    groups = [trajectories[i : i + n] for i in range(0, len(trajectories), n)]
    keep = [True] * len(groups)
    if cfg.algo.dynamic_sampling:
        rewards, trains = [t.reward for t in trajectories], [t.trains for t in trajectories]
        keep = signal_groups(rewards, group_size=n, trains=trains)
    return Generated(groups, keep, stats)


def take_batch(c: Components) -> tuple[list[Trajectory], dict[str, float]]:
    """The step's batch, with the metrics of the rounds finished since the last step
    (lengths, throughput, reward functions; none when no round finished) and the stream's
    own (none inline). The reward, accuracy and failures are the batch's: the samples this
    step trains (with dynamic sampling, not the groups it evicted)."""
    taken = c.rollouts.take(c.state.weight_version)
    metrics = rollout_metrics(c, taken.rounds)
    metrics.update(training_rewards(taken.trajectories, accuracy=c.cfg.judges_correctness))
    metrics.update(taken.metrics)
    if c.cfg.algo.dynamic_sampling:
        metrics["sampling/rounds"] = float(len(taken.rounds))
        metrics["sampling/filled_groups"] = float(taken.filled)
    return taken.trajectories, metrics


def rollout_metrics(c: Components, rounds: list[RoundStats]) -> dict[str, float]:
    """Lengths, throughput, rewards and episode metrics over ``rounds`` (none: no
    metrics)."""
    generated = [t for r in rounds for t in r.generated]
    if not generated:
        return {}
    generate_s = sum(r.generate_s for r in rounds)
    replicas: dict[str, float] = {}
    for r in rounds:
        for key, value in r.replicas.items():
            replicas[key] = replicas.get(key, 0.0) + value
    lengths = [t.generated_tokens for t in generated]
    tokens_per_s = sum(lengths) / max(generate_s, 1e-9)
    metrics = {
        "response_len/mean": sum(lengths) / len(lengths),
        "response_len/max": float(max(lengths)),
        "response/truncated_frac": sum(t.completion.finish_reason == "length" for t in generated)
        / len(generated),
        "time/reward_s": sum(r.reward_s for r in rounds),
        "time/reward_hidden_s": sum(r.reward_hidden_s for r in rounds),
        "time/generate_s": generate_s,
        "tokens_per_s": tokens_per_s,
        # per replica: one GPU, one tensor-parallel group, or one CPU engine
        "perf/generate_tokens_per_s": tokens_per_s / len(c.engine),
        **reward_metrics(RewardScores.concat([s for r in rounds for s in r.scores])),
        **replicas,
    }
    metrics.update(training_rewards(generated, accuracy=c.cfg.judges_correctness))
    if c.cfg.algo.overlong_buffer is not None:
        overlong = sum(t.reward_parts.overlong or 0.0 for t in generated)
        metrics["reward/overlong"] = overlong / len(generated)
    if c.teacher is not None:
        metrics["distill/teacher_seconds"] = sum(r.teacher_s for r in rounds)
        metrics["distill/teacher_hidden_s"] = sum(r.teacher_hidden_s for r in rounds)
    metrics.update(episode_metrics(generated))
    return metrics


def training_rewards(generated: list[Trajectory], *, accuracy: bool) -> dict[str, float]:
    """The reward (and ``accuracy``, where something judges correctness) of the samples
    that train, none when no sample does; the failed samples counted by reason."""
    metrics = {name: 0.0 for name in FAILURE_METRICS.values()}
    for t in generated:
        if t.reward_parts.failure is not None:
            metrics[FAILURE_METRICS[t.reward_parts.failure]] += 1
    trained = [t for t in generated if t.trains]
    if not trained:
        return metrics
    rewards = torch.tensor([t.reward for t in trained])
    metrics["reward/mean"] = float(rewards.mean())
    metrics["reward/std"] = float(rewards.std(unbiased=False))
    if accuracy:
        metrics["accuracy"] = sum(t.correct for t in trained) / len(trained)
    return metrics


def sample_records(
    trajectories: list[Trajectory], tokenizer, *, n: int, group_size: int
) -> list[dict]:
    """The first sample of each of the first ``n`` prompts, readable, with its dataset
    row index (``prompt_index``: which prompts a step trained, across resumes)."""
    picked = trajectories[::group_size][:n]
    return [
        {
            "prompt": tokenizer.decode(t.prompt_ids, skip_special_tokens=False),
            "completion": t.completion.text,
            "reward": t.reward,
            "reward_parts": t.reward_parts,
            "correct": t.correct,
            "finish_reason": t.completion.finish_reason,
            "weight_version": t.weight_version,
            "prompt_index": t.prompt_index,
        }
        for t in picked
    ]
