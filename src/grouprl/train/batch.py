"""Trajectories -> a right-padded TrainingBatch (advantages are filled in later)."""

from __future__ import annotations

import torch

from grouprl.types import TrainingBatch, Trajectory


def build_batch(
    trajectories: list[Trajectory], *, pad_id: int, mask_truncated: bool = False
) -> TrainingBatch:
    """One row per trajectory: prompt tokens then the engine's completion tokens.

    The loss mask covers the completion tokens only (none of them, with
    ``mask_truncated``, for a completion cut off at the length limit); the
    engine's logprobs are placed at the positions of the tokens they score.
    Advantages start at zero.
    """
    width = max(len(t.prompt_ids) + len(t.completion.token_ids) for t in trajectories)
    B = len(trajectories)
    input_ids = torch.full((B, width), pad_id, dtype=torch.long)
    attention = torch.zeros((B, width), dtype=torch.long)
    loss_mask = torch.zeros((B, width), dtype=torch.float32)
    engine_lp = torch.zeros((B, width), dtype=torch.float32)
    for b, traj in enumerate(trajectories):
        p, c = len(traj.prompt_ids), len(traj.completion.token_ids)
        input_ids[b, : p + c] = torch.tensor(traj.prompt_ids + traj.completion.token_ids)
        attention[b, : p + c] = 1
        if not (mask_truncated and traj.completion.finish_reason == "length"):
            loss_mask[b, p : p + c] = 1
        engine_lp[b, p : p + c] = torch.tensor(traj.completion.logprobs, dtype=torch.float32)
    return TrainingBatch(
        input_ids_BT=input_ids,
        attention_mask_BT=attention,
        loss_mask_BT=loss_mask,
        advantages_BT=torch.zeros_like(loss_mask),
        engine_logprobs_BT=engine_lp,
    )
