"""The training loop: algorithm-blind orchestration of one step after another.

c.rollouts.take (driver/source.py): prompt rows ─► engine.generate (weights v) ─► rewards
    ▲                                                        │     (+ overlong shaping,
    │                                                        │  the teacher's logprobs)
    └── more prompts while groups carry no signal ◄──────────┤ (dynamic sampling)
                                                             ▼
TrainingBatch ─► failed samples (and groups left too small) out of the loss
          │      (no sample left: no update this step)
          ▼
[reference / old logprobs, critic values, as the config needs; the teacher's term]
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
(driver/stream.py), ahead of the step, which takes its batch from its buffer. The push
is staged while the generation in flight goes on with version v; only the apply waits
for it (engine.pushing: the segment in flight ends first) before version v + 1 goes live.
"""

from __future__ import annotations

import logging
import time
from contextlib import nullcontext

import torch
from torch import Tensor

from grouprl.algo.advantages import ADVANTAGES, AdvantageInputs
from grouprl.algo.aggregate import LossNorm, token_mean
from grouprl.algo.corrections import mismatch_alarms
from grouprl.algo.distill import reverse_kl, teacher_advantages
from grouprl.algo.kl import kl_rewards
from grouprl.algo.shaping import policy_learns
from grouprl.algo.traits import ESTIMATORS
from grouprl.driver.batch import build_batch, trained_samples, turn_tensors
from grouprl.driver.components import Components
from grouprl.driver.evaluate import validate
from grouprl.driver.idle import failed_samples, idle_streak
from grouprl.driver.rollouts import take_batch
from grouprl.driver.source import oldest_version
from grouprl.engines.push import Staged
from grouprl.metrics.telemetry import pass_flops, rank_memory_metrics
from grouprl.rollout.reward import ON_ERROR_KEYS, record_parts
from grouprl.types import TrainingBatch, Trajectory
from grouprl.workers.critic import CriticWorker
from grouprl.workers.policy import PolicyWorker

logger = logging.getLogger(__name__)


def train_step(c: Components, trajectories: list[Trajectory], step: int) -> dict[str, float]:
    cfg, algo = c.cfg, c.cfg.algo
    batch = build_batch(
        trajectories, pad_id=c.tokenizer.pad_token_id, mask_truncated=algo.mask_truncated
    )
    valid_B, metrics = _leave_out_failures(c, trajectories, batch, step)
    metrics.update(_staleness(c, trajectories))
    if not valid_B.any():  # nothing to learn from: no update (the warning says so)
        return metrics
    reference = c.reference_logprobs
    batch.ref_logprobs_BT = reference(batch) if reference is not None else None
    token_rewards_BT = _kl_rewards(c, batch, trajectories, metrics)
    if c.critic is not None:
        batch.old_values_BT = c.critic.gather(CriticWorker.values, batch)
    scores_B = torch.tensor([t.reward for t in trajectories])
    turn_rewards_BK, turn_counts_B, credit_turns_B = turn_tensors(trajectories)
    advantages = ADVANTAGES[algo.advantage](
        AdvantageInputs(
            scores_B=scores_B,
            mask_BT=batch.loss_mask_BT,
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
    if algo.teacher_coef > 0:
        batch.advantages_BT = _teacher_term(c, batch, trajectories, valid_B, metrics)
    batch.returns_BT = advantages.returns_BT
    if c.critic is not None:
        metrics.update(c.critic.call(CriticWorker.update, batch, mini_batch_size=c.mini_batch_size))
    warmup = cfg.critic.warmup_steps if cfg.critic is not None else 0
    if policy_learns(step, critic_warmup_steps=warmup):
        _update_policy(c, batch, metrics, step)
    c.state.kl.update(metrics.get("kl"), n_samples=int(valid_B.sum()))
    if algo.beta > 0:
        metrics["kl_coef"] = c.state.kl.beta
    if cfg.rollout.n > 1:  # groups whose scores are all equal teach group estimators nothing
        metrics["zero_adv_groups_frac"] = _equal_groups_frac(scores_B, valid_B, cfg.rollout.n)
    return metrics


def _kl_rewards(
    c: Components, batch: TrainingBatch, trajectories: list[Trajectory], metrics: dict[str, float]
) -> Tensor | None:
    """With ``algo.kl_in=reward`` and a reference: the KL penalty per token (and the
    batch's ``kl`` metric, each sample's total in its reward parts); else None."""
    ref_BT, mask_BT = batch.ref_logprobs_BT, batch.loss_mask_BT
    if c.cfg.algo.kl_in != "reward" or ref_BT is None:
        return None
    batch.old_logprobs_BT = c.policy.gather(PolicyWorker.logprobs, batch)
    token_rewards_BT, kl_BT = kl_rewards(
        batch.old_logprobs_BT,
        ref_BT,
        mask_BT,
        beta=c.state.kl.beta,
        estimator=c.cfg.algo.kl_estimator,
    )
    norm = LossNorm(tokens=int(mask_BT.sum()), sequences=len(batch))
    metrics["kl"] = float(token_mean(kl_BT, mask_BT, norm=norm))
    # shown with the sample's reward; the estimator adds it per token, not to scores_B
    for t, kl in zip(trajectories, token_rewards_BT.sum(dim=1).tolist(), strict=True):
        record_parts(t, kl=kl)
    return token_rewards_BT


def _teacher_term(
    c: Components,
    batch: TrainingBatch,
    trajectories: list[Trajectory],
    valid_B: Tensor,
    metrics: dict[str, float],
) -> Tensor:
    """The advantages with the teacher's term added (``algo/distill.py``) on the samples
    that train, and ``distill/reverse_kl`` over their tokens. A sample that trains without
    the teacher's logprobs is one whose teacher call failed under ``reward.on_error=zero``:
    it trains on the task reward's advantage alone. With ``algo.teacher_top_k`` the
    teacher's term is the loss's forward KL to its top k (``algo/objective.py``), not an
    advantage: the advantages stay the task reward's."""
    has_B = torch.tensor([t.teacher_logprobs is not None for t in trajectories])
    teacher_BT = batch.teacher_logprobs_BT
    if teacher_BT is None:
        teacher_BT = torch.zeros_like(batch.engine_logprobs_BT)
    unscored = [
        t
        for t, v, h in zip(trajectories, valid_B.tolist(), has_B.tolist(), strict=True)
        if v and not h and t.reward_parts.failure is None
    ]
    if unscored:  # every round asks the teacher (driver/rollouts.generate_round)
        raise RuntimeError(
            f"{len(unscored)} samples (prompt index {unscored[0].prompt_index}) would train "
            "without the teacher's logprobs, and no failure left them out"
        )
    mask_BT = batch.loss_mask_BT * (valid_B & has_B)[:, None]
    if mask_BT.any():
        metrics["distill/reverse_kl"] = reverse_kl(
            teacher_BT=teacher_BT, sampler_BT=batch.engine_logprobs_BT, mask_BT=mask_BT
        )
    if c.cfg.algo.teacher_top_k > 0:
        return batch.advantages_BT
    return teacher_advantages(
        batch.advantages_BT,
        teacher_BT=teacher_BT,
        sampler_BT=batch.engine_logprobs_BT,
        mask_BT=mask_BT,
        coef=c.cfg.algo.teacher_coef,
    )


def _update_policy(
    c: Components, batch: TrainingBatch, metrics: dict[str, float], step: int
) -> None:
    """The policy update, its metrics and perf into ``metrics``, and its alarms."""
    started = time.perf_counter()
    metrics.update(
        c.policy.call(
            PolicyWorker.update,
            batch,
            beta=c.state.kl.beta,
            entropy_coef=c.state.entropy.coef,
            mini_batch_size=c.mini_batch_size,
            version=c.state.weight_version,
        )
    )
    for alarm in mismatch_alarms(metrics, threshold=c.cfg.algo.mismatch_alarm):
        logger.warning("step %d: %s", step, alarm)
    metrics.update(_update_perf(c, batch, time.perf_counter() - started))
    _warn_of_odd_replicas(metrics, step)


def _watch_entropy(c: Components, metrics: dict[str, float], step: int) -> None:
    """After the update: the entropy bonus's coefficient it used (``entropy_coef``) and the
    next one, and the reward ceiling that the entropy predicts (``entropy_reward_ceiling``,
    with a warning once the run nears it: ``algo/entropy.py``)."""
    algo, entropy = c.cfg.algo, metrics.get("entropy")
    if algo.entropy_coef > 0 or algo.entropy_target is not None:
        metrics["entropy_coef"] = c.state.entropy.coef
    c.state.entropy.update(entropy)
    ceiling, warning = c.state.exploration.add(entropy, metrics.get("reward/mean"))
    if ceiling is not None:
        metrics["entropy_reward_ceiling"] = ceiling
    if warning is not None:
        logger.warning("step %d: %s", step, warning)


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
    return {"staleness": sum(lags) / len(lags)} if c.rollouts.threaded else {}


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
    """Held-out scores, while the rollout source is paused (no round in flight shares
    the engine, and validation's samples are no round's, nor the teacher's)."""
    if c.eval_set is None or len(c.eval_set) == 0:
        return {}
    with c.rollouts.paused(), c.teacher.held() if c.teacher else nullcontext():
        return validate(
            run=c.rollout,
            prompt_set=c.eval_set,
            rollout=c.cfg.rollout,
            seed=c.cfg.train.seed,
            accuracy=c.cfg.judges_correctness,
        )


def one_step(c: Components, step: int) -> tuple[list[Trajectory], dict[str, float]]:
    """Generate, score, update, sync: training step ``step`` (1-based). With the stream
    (``driver/stream.py``), the batch was generated while earlier steps trained, and the
    push waits for the engine's generation in flight."""
    t0 = time.perf_counter()
    trajectories, metrics = take_batch(c)
    t1 = time.perf_counter()
    # colocated engines (the teacher's too) sleep while training uses the GPU
    with c.engine.released(), c.teacher.engines.released() if c.teacher else nullcontext():
        metrics.update(train_step(c, trajectories, step))
    _watch_entropy(c, metrics, step)
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
    c.rollouts.advanced(version)
    if c.rollouts.threaded:
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
