"""Trajectories + advantages -> a right-padded TrainingBatch."""

from __future__ import annotations

import torch

from grouprl.types import TrainingBatch, Trajectory


def build_batch(
    trajectories: list[Trajectory], advantages: list[float], *, pad_id: int
) -> TrainingBatch:
    """One row per trajectory: prompt tokens then the engine's completion tokens.

    The loss mask and advantages cover the completion tokens only; the
    engine's logprobs are placed at the positions of the tokens they score.
    """
    width = max(len(t.prompt_ids) + len(t.completion.token_ids) for t in trajectories)
    B = len(trajectories)
    input_ids = torch.full((B, width), pad_id, dtype=torch.long)
    attention = torch.zeros((B, width), dtype=torch.long)
    loss_mask = torch.zeros((B, width), dtype=torch.float32)
    adv = torch.zeros((B, width), dtype=torch.float32)
    engine_lp = torch.zeros((B, width), dtype=torch.float32)
    for b, (traj, a) in enumerate(zip(trajectories, advantages, strict=True)):
        p, c = len(traj.prompt_ids), len(traj.completion.token_ids)
        input_ids[b, : p + c] = torch.tensor(traj.prompt_ids + traj.completion.token_ids)
        attention[b, : p + c] = 1
        loss_mask[b, p : p + c] = 1
        adv[b, p : p + c] = a
        engine_lp[b, p : p + c] = torch.tensor(traj.completion.logprobs, dtype=torch.float32)
    return TrainingBatch(
        input_ids_BT=input_ids,
        attention_mask_BT=attention,
        loss_mask_BT=loss_mask,
        advantages_BT=adv,
        engine_logprobs_BT=engine_lp,
    )
