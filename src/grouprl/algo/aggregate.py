"""Loss aggregation: per-token losses -> one scalar, with global denominators.

Signature: ``fn(values_BT, mask_BT, *, norm) -> scalar``. ``norm`` carries the
counts of the whole mini-batch (across micro-batches and, later, ranks), so
summing the results of the micro-batches gives the same loss and gradient as
one pass over the mini-batch, however it is split.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from grouprl.algo.registry import Registry

AGGREGATIONS: Registry = Registry("loss aggregation")


@dataclass(frozen=True)
class LossNorm:
    tokens: int  # loss-mask tokens in the whole mini-batch
    sequences: int  # samples in the whole mini-batch


@AGGREGATIONS.register("token_mean")
def token_mean(values_BT: Tensor, mask_BT: Tensor, *, norm: LossNorm) -> Tensor:
    """Mean over every generated token of the mini-batch (DAPO's token-level loss):
    long completions weigh more than short ones, unlike GRPO's per-sequence mean."""
    return (values_BT * mask_BT).sum() / max(norm.tokens, 1)
