"""The training loop: algorithm-blind orchestration of one step after another.

sampler ─► prompt rows ─► engine.generate (weights v) ─► rewards (+ overlong shaping)
    ▲                                                        │
    └── more prompts while groups carry no signal ◄──────────┤ (dynamic sampling)
                                                             ▼
TrainingBatch ─► failed samples (and groups left too small) out of the loss
          │      (no sample left: no update this step)
          ▼
[reference / old logprobs, critic values, as the config needs]
          │
          ▼
advantages (algo registry) ─► critic update ─► policy update ─► KL coefficient
          │                                          │
          │   stage_weights (v + 1): in buckets ◄────┘   outside the push gate: the
          │          │                                   engines keep generating
          │          ▼
          │   with engine.pushing(): apply_weights (v + 1), every replica confirms v + 1
          ▼
validation every N steps ─► samples.jsonl, metrics sinks ─► checkpoint (driver/run.py)

With rollout.max_staleness >= 1 the first box runs on the stream's producer thread
(driver/stream.py): the step takes its batch from the stream's buffer instead. The push
is staged while the generation in flight goes on with version v; only the apply waits
for it (engine.pushing: the segment in flight ends first) before version v + 1 goes live.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from grouprl.algo.advantages import ADVANTAGES, AdvantageInputs
from grouprl.algo.aggregate import LossNorm, token_mean
from grouprl.algo.corrections import mismatch_alarms
from grouprl.algo.kl import KLController, kl_rewards
from grouprl.algo.shaping import overlong_penalty, policy_learns, signal_groups
from grouprl.algo.traits import ESTIMATORS
from grouprl.ckpt.best import Best
from grouprl.config.schema import RunConfig
from grouprl.data.sampler import PromptSampler
from grouprl.driver.batch import build_batch, trained_samples, turn_tensors
from grouprl.driver.evaluate import validate
from grouprl.driver.idle import failed_samples, idle_streak
from grouprl.driver.stream import Generated, Stream, Taken, oldest_version
from grouprl.engines.base import SamplingSettings
from grouprl.engines.replicas import ReplicaSet, Staged
from grouprl.metrics.telemetry import Hardware, pass_flops, rank_memory_metrics
from grouprl.rewards.scoring import RewardScores
from grouprl.rewards.scoring import metrics as reward_metrics
from grouprl.rollout.episode_scores import TimedScore
from grouprl.rollout.episodes import episode_metrics
from grouprl.rollout.reward import ON_ERROR_KEYS, record_parts
from grouprl.rollout.setup import PromptSet, RolloutFn
from grouprl.types import TrainingBatch, Trajectory
from grouprl.workers.critic import CriticWorker
from grouprl.workers.group import Role, WorkerGroup
from grouprl.workers.policy import PolicyWorker

logger = logging.getLogger(__name__)

FAILURE_METRICS = {
    "env_error": "failures/env",
    "agent_error": "failures/agent",
    "reward_error": "failures/reward",
}
"""The metric that counts each step's samples failed for each reason (dropped or not)."""


@dataclass
class RunState:
    """What changes as the run goes, saved and restored whole by a checkpoint: the step,
    the weight version the engine serves, the sampler's position, the KL controller, the
    best validation so far (``checkpoint.keep_best``), the steps in a row that trained no
    sample (``driver/idle.py``)."""

    sampler: PromptSampler
    kl: KLController
    step: int = 0
    weight_version: int = 0
    best: Best | None = None
    idle_steps: int = 0

    def state_dict(self, *, sampler: dict[str, Any] | None = None) -> dict[str, Any]:
        """``sampler``: the sampler's position to record instead of its current one (before
        a batch drawn ahead)."""
        return {
            "step": self.step,
            "weight_version": self.weight_version,
            "sampler": self.sampler.state_dict() if sampler is None else sampler,
            "algo": self.kl.state_dict(),
            "best": None if self.best is None else self.best.to_dict(),
            "idle_steps": self.idle_steps,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step, self.weight_version = state["step"], state["weight_version"]
        self.sampler.load_state_dict(state["sampler"])
        self.kl.load_state_dict(state["algo"])
        self.best = Best.from_dict(state.get("best"))
        self.idle_steps = int(state.get("idle_steps", 0))  # none in older checkpoints


@dataclass(frozen=True)
class Components:
    """Everything the loop needs, built once by ``driver.run``; ``state`` is what changes."""

    cfg: RunConfig
    tokenizer: Any
    group: WorkerGroup  # the training ranks (this process, or Ray actors)
    policy: Role[PolicyWorker]  # weights, optimizer, LR schedule
    reference_logprobs: Callable[[TrainingBatch], Tensor] | None  # the KL reference's, beta > 0
    engine: ReplicaSet  # the rollout engines, one or many, in the driver or Ray actors
    train_set: PromptSet
    eval_set: PromptSet | None
    score: TimedScore  # the reward functions, timed
    rollout: RolloutFn  # episodes for a prompt set, scored (single- or multi-turn)
    mini_batch_size: int
    total_steps: int
    state: RunState
    checkpoint_files: dict[str, bytes]  # the model's config and tokenizer files, the config
    hardware: Hardware  # model shape and device peak, for MFU
    critic: Role[CriticWorker] | None = None  # with a critic: section
    stream: Stream | None = None  # with rollout.max_staleness >= 1: the rollout stream
    env: Any = None  # the environment (its worker processes close with the run)

    def checkpoint_state(self) -> dict[str, Any]:
        """``state`` as a checkpoint records it; with the stream, its buffer and rounds in
        flight too (``stream``), and the sampler as the stream saw it under its lock."""
        if self.stream is None:
            return self.state.state_dict() | {"stream": None}
        stream = self.stream.state_dict()
        return self.state.state_dict(sampler=stream["sampler"]) | {"stream": stream}


def sampling_seed(seed: int, step: int, round_: int = 0) -> int:
    """Distinct per (run seed, step, generation round); sample j of prompt i adds
    i * n + j (engines)."""
    return ((seed * 1_000_003 + step) * 100_000 + round_ * 10_000_019) % (2**31 - 1)


def _generate(
    c: Components, rows: list[int], *, seed: int
) -> tuple[list[Trajectory], RewardScores]:
    """One round: the prompts at ``rows`` x ``rollout.n`` samples, scored and shaped."""
    cfg = c.cfg
    prompt_set = c.train_set.take(rows)
    settings = SamplingSettings(
        group_size=cfg.rollout.n,
        temperature=cfg.rollout.temperature,
        top_p=cfg.rollout.top_p,
        top_k=cfg.rollout.top_k,
        max_tokens=cfg.rollout.max_tokens,
        seed=seed,
        ignore_eos=cfg.rollout.ignore_eos,
    )
    trajectories, scores = c.rollout(prompt_set, settings)
    if cfg.algo.overlong_buffer is not None:
        for t in trajectories:
            penalty = overlong_penalty(
                len(t.completion.token_ids),
                max_tokens=cfg.rollout.max_tokens,
                buffer=cfg.algo.overlong_buffer,
                factor=cfg.algo.overlong_penalty,
            )
            record_parts(t, overlong=penalty)
    return trajectories, scores


def rollout_step(c: Components, step: int) -> tuple[list[Trajectory], dict[str, float]]:
    """The step's ``data.batch_size`` groups. With ``algo.dynamic_sampling``, groups whose
    rewards are all equal are dropped and more prompts sampled, for at most
    ``algo.max_sampling_rounds`` rounds; a batch still short is filled with dropped
    groups (they add no gradient) and a warning says so."""
    cfg, algo = c.cfg, c.cfg.algo
    n, wanted = cfg.rollout.n, cfg.data.batch_size
    t0 = time.perf_counter()
    c.score.seconds = 0.0
    c.engine.drain_metrics()  # what validation generated is not this step's
    generated: list[Trajectory] = []
    all_scores: list[RewardScores] = []
    kept: list[list[Trajectory]] = []
    dropped: list[list[Trajectory]] = []
    rounds = algo.max_sampling_rounds if algo.dynamic_sampling else 1
    for round_ in range(rounds):
        rows = c.state.sampler.next_batch(cfg.data.batch_size)
        seed = sampling_seed(cfg.train.seed, step, round_)
        trajectories, scores = _generate(c, rows, seed=seed)
        generated += trajectories
        all_scores.append(scores)
        varied = signal_groups(
            [t.reward for t in trajectories], group_size=n, trains=[t.trains for t in trajectories]
        )
        for start, signal in zip(range(0, len(trajectories), n), varied, strict=True):
            group = trajectories[start : start + n]
            (kept if signal or not algo.dynamic_sampling else dropped).append(group)
        if len(kept) >= wanted:
            break
    filled = max(0, wanted - len(kept))
    if filled:
        logger.warning(
            "step %d: dynamic sampling found %d of %d groups with differing rewards in "
            "algo.max_sampling_rounds=%d rounds; filled the batch with %d zero-advantage "
            "groups. If this repeats, raise algo.max_sampling_rounds or check that the "
            "rewards can differ (a task too easy or too hard for the model).",
            step,
            len(kept),
            wanted,
            rounds,
            filled,
        )
        kept += dropped[:filled]
    batch = [t for group in kept[:wanted] for t in group]
    generate_s = time.perf_counter() - t0 - c.score.seconds
    stats = RoundStats(generated, all_scores, generate_s, c.score.seconds, c.engine.drain_metrics())
    metrics = rollout_metrics(c, [stats])
    if algo.dynamic_sampling:
        metrics["sampling/rounds"] = float(len(all_scores))
        metrics["sampling/filled_groups"] = float(filled)
    return batch, metrics


@dataclass
class RoundStats:
    """What one or more generation rounds produced, for the step's metrics: every sample
    generated (kept or not), the scores, the seconds generating and scoring, and the
    replicas' counters (``ReplicaSet.drain_metrics``)."""

    generated: list[Trajectory]
    scores: list[RewardScores]
    generate_s: float
    reward_s: float
    replicas: dict[str, float]


def rollout_metrics(c: Components, rounds: list[RoundStats]) -> dict[str, float]:
    """Lengths, throughput, rewards and episode metrics over ``rounds`` (a synchronous
    step's, or those the stream finished since the last step; none: no metrics)."""
    cfg, algo = c.cfg, c.cfg.algo
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
        "time/generate_s": generate_s,
        "tokens_per_s": tokens_per_s,
        # per replica: one GPU, one tensor-parallel group, or one CPU engine
        "perf/generate_tokens_per_s": tokens_per_s / len(c.engine),
        **reward_metrics(RewardScores.concat([s for r in rounds for s in r.scores])),
        **replicas,
    }
    metrics.update(_training_rewards(generated, accuracy=cfg.judges_correctness))
    if algo.overlong_buffer is not None:
        metrics["reward/overlong"] = sum(t.reward_parts.overlong or 0.0 for t in generated) / len(
            generated
        )
    metrics.update(episode_metrics(generated))
    return metrics


def stream_round(c: Components, rows: list[int], round_index: int) -> Generated:
    """One round of the stream (on its producer thread): the prompts at ``rows``, seeded
    by the global round index as the synchronous loop seeds step ``round_index + 1``'s
    first round, with dynamic sampling's verdict per group."""
    cfg = c.cfg
    t0 = time.perf_counter()
    c.score.seconds = 0.0
    c.engine.drain_metrics()  # what validation generated is not this round's
    seed = sampling_seed(cfg.train.seed, round_index + 1)
    trajectories, scores = _generate(c, rows, seed=seed)
    reward_s = c.score.seconds
    stats = RoundStats(
        trajectories,
        [scores],
        time.perf_counter() - t0 - reward_s,
        reward_s,
        c.engine.drain_metrics(),
    )
    n = cfg.rollout.n
    groups = [trajectories[i : i + n] for i in range(0, len(trajectories), n)]
    keep = [True] * len(groups)
    if cfg.algo.dynamic_sampling:
        keep = signal_groups(
            [t.reward for t in trajectories], group_size=n, trains=[t.trains for t in trajectories]
        )
    return Generated(groups, keep, stats)


def _take(c: Components) -> tuple[list[Trajectory], dict[str, float]]:
    """The step's batch from the stream, with the metrics of the rounds finished since
    the last step (lengths, throughput, reward functions; none when no round finished)
    and the stream's own. The reward, accuracy and failures are the batch's: the
    samples this step trains, generated by earlier rounds."""
    assert c.stream is not None, "a stream runs with rollout.max_staleness >= 1"
    taken: Taken = c.stream.take(c.state.weight_version)
    metrics = rollout_metrics(c, taken.rounds)
    metrics.update(_training_rewards(taken.trajectories, accuracy=c.cfg.judges_correctness))
    metrics.update(taken.metrics)
    if c.cfg.algo.dynamic_sampling:
        metrics["sampling/rounds"] = float(len(taken.rounds))
        metrics["sampling/filled_groups"] = taken.metrics["stream/filled"]
    return taken.trajectories, metrics


def _training_rewards(generated: list[Trajectory], *, accuracy: bool) -> dict[str, float]:
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


def train_step(c: Components, trajectories: list[Trajectory], step: int) -> dict[str, float]:
    cfg, algo = c.cfg, c.cfg.algo
    batch = build_batch(
        trajectories, pad_id=c.tokenizer.pad_token_id, mask_truncated=algo.mask_truncated
    )
    valid_B, metrics = _leave_out_failures(c, trajectories, batch, step)
    metrics.update(_staleness(c, trajectories))
    if not valid_B.any():  # nothing to learn from: no update (the warning says so)
        return metrics
    mask_BT = batch.loss_mask_BT
    ref_BT = c.reference_logprobs(batch) if c.reference_logprobs is not None else None
    batch.ref_logprobs_BT = ref_BT
    token_rewards_BT = None
    if algo.kl_in == "reward" and ref_BT is not None:
        batch.old_logprobs_BT = c.policy.gather(PolicyWorker.logprobs, batch)
        token_rewards_BT, kl_BT = kl_rewards(
            batch.old_logprobs_BT,
            ref_BT,
            mask_BT,
            beta=c.state.kl.beta,
            estimator=algo.kl_estimator,
        )
        norm = LossNorm(tokens=int(mask_BT.sum()), sequences=len(batch))
        metrics["kl"] = float(token_mean(kl_BT, mask_BT, norm=norm))
        # shown with the sample's reward; the estimator adds it per token, not to scores_B
        for t, kl in zip(trajectories, token_rewards_BT.sum(dim=1).tolist(), strict=True):
            record_parts(t, kl=kl)
    if c.critic is not None:
        batch.old_values_BT = c.critic.gather(CriticWorker.values, batch)
    scores_B = torch.tensor([t.reward for t in trajectories])
    turn_rewards_BK, turn_counts_B, credit_turns_B = turn_tensors(trajectories)
    advantages = ADVANTAGES[algo.advantage](
        AdvantageInputs(
            scores_B=scores_B,
            mask_BT=mask_BT,
            group_size=cfg.rollout.n,
            token_rewards_BT=token_rewards_BT,
            values_BT=batch.old_values_BT,
            turn_index_BT=batch.turn_index_BT,
            turn_rewards_BK=turn_rewards_BK,
            turn_counts_B=turn_counts_B,
            credit_turns_B=credit_turns_B,
            valid_B=valid_B,
        ),
        cfg=algo,
    )
    batch.advantages_BT = advantages.advantages_BT
    batch.returns_BT = advantages.returns_BT
    if c.critic is not None:
        metrics.update(c.critic.call(CriticWorker.update, batch, mini_batch_size=c.mini_batch_size))
    warmup = cfg.critic.warmup_steps if cfg.critic is not None else 0
    if policy_learns(step, critic_warmup_steps=warmup):
        beta = c.state.kl.beta
        started = time.perf_counter()
        metrics.update(
            c.policy.call(
                PolicyWorker.update,
                batch,
                beta=beta,
                mini_batch_size=c.mini_batch_size,
                version=c.state.weight_version,
            )
        )
        for alarm in mismatch_alarms(metrics, threshold=algo.mismatch_alarm):
            logger.warning("step %d: %s", step, alarm)
        metrics.update(_update_perf(c, batch, time.perf_counter() - started))
        _warn_of_odd_replicas(metrics, step)
    c.state.kl.update(metrics.get("kl"), n_samples=int(valid_B.sum()))
    if algo.beta > 0:
        metrics["kl_coef"] = c.state.kl.beta
    if cfg.rollout.n > 1:  # groups whose scores are all equal teach group estimators nothing
        metrics["zero_adv_groups_frac"] = _equal_groups_frac(scores_B, valid_B, cfg.rollout.n)
    return metrics


def _equal_groups_frac(scores_B: Tensor, valid_B: Tensor, group_size: int) -> float:
    """The share of the groups that train whose training samples' scores are all equal."""
    valid_PG = valid_B.view(-1, group_size)
    scores_PG = scores_B.view(-1, group_size)
    high_P = torch.where(valid_PG, scores_PG, -torch.inf).amax(dim=1)
    low_P = torch.where(valid_PG, scores_PG, torch.inf).amin(dim=1)
    trains_P = valid_PG.any(dim=1)
    return float((high_P == low_P)[trains_P].float().mean())


def _leave_out_failures(
    c: Components, trajectories: list[Trajectory], batch: TrainingBatch, step: int
) -> tuple[Tensor, dict[str, float]]:
    """Which samples train (``driver/batch.trained_samples``): the loss mask of the others
    (failed and dropped, or in a group left with fewer than the estimator's minimum) is
    set to zero; their counts as metrics, and one warning for all of them. A step that
    trains none adds to the streak that stops the run (``driver/idle.py``)."""
    n, advantage = c.cfg.rollout.n, c.cfg.algo.advantage
    smallest = ESTIMATORS[advantage].min_group_size
    valid_B = trained_samples(trajectories, group_size=n, min_group_size=smallest)
    c.state.idle_steps = idle_streak(
        c.state.idle_steps,
        trained=bool(valid_B.any()),
        trajectories=trajectories,
        step=step,
        limit=c.cfg.trainer.max_idle_steps,
    )
    batch.loss_mask_BT = batch.loss_mask_BT * valid_B[:, None]
    groups_dropped = int((~valid_B.view(-1, n).any(dim=1)).sum())
    if not valid_B.all():
        logger.warning(
            "step %d: %s; groups dropped whole: %d (fewer than %d of their samples train, "
            "which algo.advantage=%s needs); %s. Set %s to zero to train such samples as "
            "reward 0 instead, or to raise to stop at the first.",
            step,
            failed_samples(trajectories),
            groups_dropped,
            smallest,
            advantage,
            f"{int(valid_B.sum())} of {len(valid_B)} samples train"
            if valid_B.any()
            else "no sample trains: this step makes no update",
            _on_error_keys(trajectories),
        )
    return valid_B, {
        "train/dropped_samples": float((~valid_B).sum()),
        "train/dropped_groups": float(groups_dropped),
    }


def _on_error_keys(trajectories: list[Trajectory]) -> str:
    """The keys that decide the failures that occurred (``ON_ERROR_KEYS``): ``reward.on_error``
    for reward errors only, ``env.on_error`` for environment or agent errors."""
    reasons = {t.reward_parts.failure for t in trajectories if not t.trains}
    keys = sorted({ON_ERROR_KEYS[r] for r in reasons if r in ON_ERROR_KEYS})
    return " and ".join(keys or sorted(set(ON_ERROR_KEYS.values())))


def _staleness(c: Components, trajectories: list[Trajectory]) -> dict[str, float]:
    """Weight versions each sample that trains lags the policy it trains (bounded by
    rollout.max_staleness: a larger lag is a bug in the loop, never trained on). A failed
    sample left out (``Trajectory.trains`` False) neither counts nor trips the bound: it
    never trains, and an episode whose agent failed before its first call has no
    version of its own (the gateway gives it the one the episode opened with)."""
    lags = [c.state.weight_version - oldest_version(t) for t in trajectories if t.trains]
    if not lags:
        return {}
    if max(lags) > c.cfg.rollout.max_staleness:
        raise RuntimeError(
            f"a batch generated with weights {c.state.weight_version - max(lags)} would train "
            f"policy version {c.state.weight_version}: more than rollout.max_staleness="
            f"{c.cfg.rollout.max_staleness} behind"
        )
    return {"staleness": sum(lags) / len(lags)} if c.stream is not None else {}


def _update_perf(c: Components, batch: TrainingBatch, seconds: float) -> dict[str, float]:
    """The policy update's time, tokens per second per rank (each pass over the batch's
    real tokens counts), and MFU (``metrics/telemetry.py``)."""
    passes, ranks = c.cfg.algo.num_iterations, c.group.world_size
    flops = passes * pass_flops(c.hardware.shape, batch.attention_mask_BT, batch.loss_mask_BT).total
    tokens = passes * int(batch.attention_mask_BT.sum())
    return {
        "time/update_s": seconds,
        "perf/train_tokens_per_s": tokens / seconds / ranks,
        "perf/mfu": flops / (seconds * ranks * c.hardware.peak_flops),
    }


def _warn_of_odd_replicas(metrics: dict[str, float], step: int) -> None:
    """The logprob-gap alarm per replica: a replica whose samples the trainer scores far
    apart from the others' (over 3x the lowest replica's gap and 1e-3 above it) is
    sampling with other weights than the version it confirmed."""
    gaps = {
        int(key.split("/")[1]): value
        for key, value in metrics.items()
        if key.startswith("replica/") and key.endswith("/engine_logprob_gap")
    }
    if len(gaps) < 2:
        return
    low = min(gaps.values())
    for k, gap in sorted(gaps.items()):
        if gap > 3 * low and gap - low > 1e-3:
            logger.warning(
                "step %d: rollout replica %d's engine/trainer logprob gap is %.3g (lowest "
                "replica %.3g): it samples with other weights than the trainer's; see its "
                "replica/%d/engine_logprob_gap metric and its actor's log",
                step,
                k,
                gap,
                low,
                k,
            )


def stage_weights(c: Components, *, version: int) -> Staged:
    """Each node's leader rank gathers the policy's weights in buckets and stages them on
    the replicas on its node as ``version`` (outside the push gate: the replicas keep
    generating with the weights they serve); what the ranks staged, summed."""
    targets = c.engine.targets(c.group.leaders())
    reports = c.policy.each(
        PolicyWorker.stage_weights,
        targets,
        version=version,
        lora_bases=frozenset(c.engine.lora_bases),
    )
    return sum((r for r in reports if r is not None), Staged())


def sync_weights(c: Components, *, version: int) -> Staged:
    """Stages the policy's weights on every replica as ``version``, then has every replica
    make them live (``ReplicaSet.apply_weights``: under the push gate) and report it."""
    staged = stage_weights(c, version=version)
    c.engine.apply_weights(version, staged=staged)
    c.state.weight_version = version
    return staged


def run_validation(c: Components) -> dict[str, float]:
    """Held-out scores; with the stream, while it is paused (no round in flight shares
    the engine, and validation's samples are no round's)."""
    if c.eval_set is None or len(c.eval_set) == 0:
        return {}
    with c.stream.paused() if c.stream is not None else nullcontext():
        return validate(
            run=c.rollout,
            prompt_set=c.eval_set,
            rollout=c.cfg.rollout,
            seed=c.cfg.train.seed,
            accuracy=c.cfg.judges_correctness,
        )


def one_step(c: Components, step: int) -> tuple[list[Trajectory], dict[str, float]]:
    """Generate, score, update, sync: training step ``step`` (1-based). With the stream
    (``driver/stream.py``), the batch comes from its buffer, generated while earlier
    steps trained, and the push waits for the engine's generation in flight."""
    t0 = time.perf_counter()
    trajectories, metrics = rollout_step(c, step) if c.stream is None else _take(c)
    t1 = time.perf_counter()
    with c.engine.released():  # a colocated engine sleeps while training uses the GPU
        metrics.update(train_step(c, trajectories, step))
    t2 = time.perf_counter()
    version = c.state.weight_version + 1
    # staged while the stream's generation goes on with the old weights; applied under
    # the push gate (the generation in flight ends its segment first)
    staged = stage_weights(c, version=version)
    t3 = time.perf_counter()
    with c.engine.pushing():
        t4 = time.perf_counter()
        c.engine.apply_weights(version, staged=staged)
        c.state.weight_version = version
    t5 = time.perf_counter()
    if c.stream is not None:
        c.stream.advanced(version)
        metrics["time/wait_rollout_s"] = t4 - t3
    metrics.update(
        {
            "time/train_s": t2 - t1,
            "time/push_stage_s": t3 - t2,
            "time/push_apply_s": t5 - t4,
            "time/weight_sync_s": (t3 - t2) + (t5 - t4),
            "time/step_s": t5 - t0,
            "rollout/push_bytes": float(staged.moved_bytes),
        }
    )
    metrics["weight_version"] = float(c.state.weight_version)
    metrics.update(rank_memory_metrics(c.policy.each(PolicyWorker.memory)))
    c.state.step = step
    return trajectories, metrics
