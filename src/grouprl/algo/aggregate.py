"""Loss aggregation: per-token losses -> one scalar, with global denominators.

Signature: ``fn(values_BT, mask_BT, *, norm) -> scalar``. ``norm`` carries the
counts of the whole mini-batch (across micro-batches and, later, ranks), so
summing the results of the micro-batches gives the same loss and gradient as
one pass over the mini-batch, however it is split. Suffixes: B samples, T tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from grouprl.algo.registry import Registry

AGGREGATIONS: Registry = Registry("loss aggregation")


@dataclass(frozen=True)
class LossNorm:
    tokens: int  # loss-mask tokens in the whole mini-batch
    sequences: int  # samples with loss tokens in the whole mini-batch (as verl: a dropped
    # or masked sample is no sequence of the mean)
    constant_tokens: int | None = None  # Dr.GRPO's constant length (algo.norm_tokens)


@AGGREGATIONS.register("token_mean")
def token_mean(values_BT: Tensor, mask_BT: Tensor, *, norm: LossNorm) -> Tensor:
    """Mean over every generated token of the mini-batch (DAPO's token-level loss):
    long completions weigh more than short ones, unlike GRPO's per-sequence mean."""
    return (values_BT * mask_BT).sum() / max(norm.tokens, 1)


@AGGREGATIONS.register("seq_mean_token_mean")
def seq_mean_token_mean(values_BT: Tensor, mask_BT: Tensor, *, norm: LossNorm) -> Tensor:
    """GRPO as in DeepSeekMath: each sequence's token mean, averaged over sequences

        1/N sum_i 1/|y_i| sum_t v_i,t        (N = norm.sequences)

    so every completion weighs the same whatever its length. A sequence with no loss
    tokens (a failed, dropped or fully masked sample) contributes 0 and is not counted
    in N: ``norm.sequences`` counts only the samples with loss tokens, as verl does.
    """
    per_seq_B = (values_BT * mask_BT).sum(dim=1) / mask_BT.sum(dim=1).clamp(min=1)
    return per_seq_B.sum() / max(norm.sequences, 1)


@AGGREGATIONS.register("seq_mean_token_sum_norm")
def seq_mean_token_sum_norm(values_BT: Tensor, mask_BT: Tensor, *, norm: LossNorm) -> Tensor:
    """Dr.GRPO (Liu et al. 2025): token sums divided by a constant length, not |y_i|,

        1/N sum_i 1/L sum_t v_i,t           (N = norm.sequences, L = norm.constant_tokens)

    removing GRPO's length bias. L is ``algo.norm_tokens`` (normally
    rollout.max_tokens). Departs from verl's mode of the same name, which does
    not divide by N (that only rescales the learning rate).
    """
    if norm.constant_tokens is None:
        raise ValueError(
            "seq_mean_token_sum_norm needs LossNorm.constant_tokens (algo.norm_tokens)"
        )
    return (values_BT * mask_BT).sum() / (max(norm.sequences, 1) * norm.constant_tokens)
