"""Trajectories -> a right-padded TrainingBatch (advantages are filled in later), and which
of them train. Suffixes: B samples, T tokens, P prompts, G samples per prompt, K turns."""

from __future__ import annotations

import torch
from torch import Tensor

from grouprl.algo.distill import TOP_PAD_LOGPROB
from grouprl.types import Completion, TrainingBatch, Trajectory


def build_batch(
    trajectories: list[Trajectory], *, pad_id: int, mask_truncated: bool = False
) -> TrainingBatch:
    """One row per trajectory: prompt tokens, then each turn's completion and observation.

    The loss mask covers the model's tokens only (none of them for a failed sample
    left out of training, ``not traj.trains``; none either, with ``mask_truncated``,
    for an episode whose last turn was cut off at the length limit); the engine's
    logprobs are placed at the positions of the tokens they score and
    ``turn_index_BT`` numbers the model turns. With more than one rollout replica,
    ``replica_BT`` says which sampled each generated token (-1 elsewhere).
    ``version_BT`` is the weight version that sampled each generated token
    (``Completion.versions``; a completion without them: the trajectory's
    ``weight_version``), -1 elsewhere. The teacher's logprobs (``teacher_logprobs_BT``,
    when any trajectory has them) sit where the engine's do, 0 in a row without them;
    so do the teacher's top k (``teacher_top_*_BTK``), padding in a row without them.
    Advantages start at zero.
    """
    rows = [t.sequence_ids() for t in trajectories]
    width = max(len(ids) for ids in rows)
    B = len(trajectories)
    input_ids = torch.full((B, width), pad_id, dtype=torch.long)
    attention = torch.zeros((B, width), dtype=torch.long)
    loss_mask = torch.zeros((B, width), dtype=torch.float32)
    turn_index = torch.full((B, width), -1, dtype=torch.long)
    engine_lp = torch.zeros((B, width), dtype=torch.float32)
    replica = torch.full((B, width), -1, dtype=torch.long)
    version = torch.full((B, width), -1, dtype=torch.long)
    teacher_lp = torch.zeros((B, width), dtype=torch.float32)
    generated: list[list[int]] = []  # each row's columns of generated tokens
    for b, (traj, ids) in enumerate(zip(trajectories, rows, strict=True)):
        generated.append([])
        input_ids[b, : len(ids)] = torch.tensor(ids)
        attention[b, : len(ids)] = 1
        truncated = mask_truncated and traj.completion.finish_reason == "length"
        in_loss = traj.trains and not truncated
        start, teacher = len(traj.prompt_ids), _teacher_turns(traj)
        for k, turn in enumerate(traj.turns):
            end = start + len(turn.completion.token_ids)
            if teacher is not None:
                teacher_lp[b, start:end] = torch.tensor(teacher[k], dtype=torch.float32)
            loss_mask[b, start:end] = float(in_loss)
            turn_index[b, start:end] = k
            replica[b, start:end] = turn.completion.replica
            engine_lp[b, start:end] = torch.tensor(turn.completion.logprobs, dtype=torch.float32)
            version[b, start:end] = torch.tensor(token_versions(turn.completion, traj))
            generated[b] += range(start, end)
            start = end + len(turn.observation_ids)
    top_ids, top_lp = _teacher_top(trajectories, generated, width=width)
    return TrainingBatch(
        input_ids_BT=input_ids,
        attention_mask_BT=attention,
        loss_mask_BT=loss_mask,
        turn_index_BT=turn_index,
        advantages_BT=torch.zeros_like(loss_mask),
        engine_logprobs_BT=engine_lp,
        replica_BT=replica if int(replica.max()) > 0 else None,
        version_BT=version,
        teacher_logprobs_BT=teacher_lp
        if any(t.teacher_logprobs is not None for t in trajectories)
        else None,
        teacher_top_ids_BTK=top_ids,
        teacher_top_logprobs_BTK=top_lp,
    )


def _teacher_top(
    trajectories: list[Trajectory], generated: list[list[int]], *, width: int
) -> tuple[Tensor | None, Tensor | None]:
    """The teacher's top-k ids and logprobs ``(B, width, K)`` at the columns of each row's
    generated tokens (``generated``); id 0 at ``TOP_PAD_LOGPROB`` elsewhere, and in the
    rows without them. None, None: no trajectory has them."""
    tops = [(t.teacher_top_ids, t.teacher_top_logprobs) for t in trajectories]
    K = max((len(row) for ids, _ in tops if ids for row in ids), default=0)
    if K == 0:
        return None, None
    ids_BTK = torch.zeros((len(trajectories), width, K), dtype=torch.long)
    lp_BTK = torch.full((len(trajectories), width, K), TOP_PAD_LOGPROB, dtype=torch.float32)
    for b, ((ids, lps), columns) in enumerate(zip(tops, generated, strict=True)):
        if ids is None or lps is None:
            continue
        if len(ids) != len(columns) or len(lps) != len(columns):
            raise ValueError(
                f"a trajectory of prompt index {trajectories[b].prompt_index} has the "
                f"teacher's top k at {len(ids)} positions for {len(columns)} generated tokens"
            )
        if columns:  # one teacher call: k entries at every position
            k = len(ids[0])
            ids_BTK[b, columns, :k] = torch.tensor(ids, dtype=torch.long)
            lp_BTK[b, columns, :k] = torch.tensor(lps, dtype=torch.float32)
    return ids_BTK, lp_BTK


def _teacher_turns(traj: Trajectory) -> list[list[float]] | None:
    """``traj.teacher_logprobs`` cut into its model turns (None: it has none)."""
    logprobs = traj.teacher_logprobs
    if logprobs is None:
        return None
    if len(logprobs) != traj.generated_tokens:
        raise ValueError(
            f"a trajectory of prompt index {traj.prompt_index} has {len(logprobs)} teacher "
            f"logprobs for {traj.generated_tokens} generated tokens: one per token, or none"
        )
    turns, start = [], 0
    for turn in traj.turns:
        end = start + len(turn.completion.token_ids)
        turns.append(logprobs[start:end])
        start = end
    return turns


def token_versions(completion: Completion, traj: Trajectory) -> list[int]:
    """The weight version of each of ``completion``'s tokens: its own (``versions``), else
    the trajectory's ``weight_version`` for all of them."""
    if not completion.versions:
        return [traj.weight_version] * len(completion.token_ids)
    if len(completion.versions) != len(completion.token_ids):
        raise ValueError(
            f"a completion of prompt index {traj.prompt_index} has {len(completion.versions)} "
            f"weight versions for {len(completion.token_ids)} tokens: the engine must give "
            "one per token (Completion.versions), or none"
        )
    return completion.versions


def trained_samples(
    trajectories: list[Trajectory], *, group_size: int, min_group_size: int
) -> Tensor:
    """Which samples train (bool ``[B]``): those not dropped (``Trajectory.trains``), in
    groups of ``group_size`` consecutive samples that keep at least ``min_group_size`` of
    them (the estimator's, ``algo/traits.py``); a group left with fewer is dropped whole."""
    trains_PG = torch.tensor([t.trains for t in trajectories]).view(-1, group_size)
    enough_P1 = trains_PG.sum(dim=1, keepdim=True) >= min_group_size
    return (trains_PG & enough_P1).flatten()


def turn_tensors(trajectories: list[Trajectory]) -> tuple[Tensor, Tensor, Tensor]:
    """Per-turn records for multi-turn estimators: each model turn's reward ``[B, K]``
    (zero-padded to the longest episode), the number of turns ``[B]``, and how many
    leading turns earn turn-level credit ``[B]``: up to and including the first turn
    whose tool call returned (``turn.info["tool_calls"] > 0``), else the first turn.
    A failed sample's turns earn nothing (all zero): like its outcome (``FAILED_OUTCOME``),
    what its broken episode's turns scored never trains (``on_error=zero``)."""
    K = max(len(t.turns) for t in trajectories)
    rewards_BK = torch.zeros((len(trajectories), K))
    counts_B = torch.tensor([len(t.turns) for t in trajectories])
    credit = []
    for b, traj in enumerate(trajectories):
        if traj.reward_parts.failure is None:
            rewards_BK[b, : len(traj.turns)] = torch.tensor([t.reward for t in traj.turns])
        called = [k for k, turn in enumerate(traj.turns) if turn.info.get("tool_calls", 0) > 0]
        credit.append(called[0] + 1 if called else 1)
    return rewards_BK, counts_B, torch.tensor(credit)
