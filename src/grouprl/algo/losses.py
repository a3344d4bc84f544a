"""Policy losses: per-token surrogate losses, before aggregation.

Signature: ``fn(*, logprobs_BT, old_logprobs_BT, advantages_BT, cfg) -> PolicyLoss``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from grouprl.algo.registry import Registry
from grouprl.config.schema import AlgoConfig

POLICY_LOSSES: Registry = Registry("policy loss")


@dataclass
class PolicyLoss:
    loss_BT: Tensor  # per-token loss, to be aggregated under the loss mask
    clipped_BT: Tensor  # bool: the clip was active (gradient zero) on this token


@POLICY_LOSSES.register("ppo_clip")
def ppo_clip(
    *, logprobs_BT: Tensor, old_logprobs_BT: Tensor, advantages_BT: Tensor, cfg: AlgoConfig
) -> PolicyLoss:
    """PPO's clipped surrogate on token ratios (as in GRPO):

        ratio = exp(logp - logp_old)
        loss  = -min(ratio * A, clip(ratio, 1 - eps_low, 1 + eps_high) * A)

    With separate low/high clip ranges (DAPO's clip-higher when eps_high > eps_low).
    """
    ratio_BT = torch.exp(logprobs_BT - old_logprobs_BT)
    unclipped_BT = ratio_BT * advantages_BT
    clipped_ratio_BT = ratio_BT.clamp(1 - cfg.clip_eps_low, 1 + cfg.clip_eps_high)
    clipped_BT = clipped_ratio_BT * advantages_BT
    return PolicyLoss(
        loss_BT=-torch.minimum(unclipped_BT, clipped_BT), clipped_BT=clipped_BT < unclipped_BT
    )
