"""The critic's loss: PPO's clipped value regression, per token before aggregation.

Suffixes: B samples, T tokens.
"""

from __future__ import annotations

import torch
from torch import Tensor


def clipped_value_loss(
    *, values_BT: Tensor, old_values_BT: Tensor, returns_BT: Tensor, clip: float | None
) -> tuple[Tensor, Tensor]:
    """Squared error to the returns, with PPO's value clipping (as in OpenAI baselines):

        V_clip = V_old + clip(V - V_old, -c, c)
        loss   = 1/2 * max((V - R)^2, (V_clip - R)^2)

    so a value that moved more than c from the one the advantages were computed with
    gets no gradient pulling it further. With ``clip=None``: 1/2 * (V - R)^2.
    Returns the per-token loss and where the clipped term won (it has no gradient).
    """
    loss_BT = (values_BT - returns_BT) ** 2
    if clip is None:
        return 0.5 * loss_BT, torch.zeros_like(loss_BT, dtype=torch.bool)
    clipped_values_BT = old_values_BT + (values_BT - old_values_BT).clamp(-clip, clip)
    clipped_loss_BT = (clipped_values_BT - returns_BT) ** 2
    return 0.5 * torch.maximum(loss_BT, clipped_loss_BT), clipped_loss_BT > loss_BT
