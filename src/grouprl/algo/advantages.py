"""Advantage estimators: rewards of G samples per prompt -> one advantage per sample.

Signature of every estimator: ``fn(rewards_PG, *, cfg) -> advantages_PG`` where
``cfg`` is the ``AlgoConfig``. Suffixes: P prompts, G samples per prompt.

All estimators here score outcomes (one reward per completion); the loop gives
every token of a completion its sample's advantage.
"""

from __future__ import annotations

from torch import Tensor

from grouprl.algo.registry import Registry
from grouprl.config.schema import AlgoConfig

ADVANTAGES: Registry = Registry("advantage estimator")


def group_normalized(rewards_PG: Tensor, *, scale_by_std: bool, eps: float) -> Tensor:
    """Reward minus the group mean, optionally divided by the group std + eps.

    The std is the population std (``unbiased=False``, divide by G), which
    departs from TRL and verl (they use ``torch.std``, the sample std, divide
    by G - 1), so each group's advantages have unit variance exactly: one
    success among G binary rewards scores +sqrt(G - 1), each failure
    -1/sqrt(G - 1). A group whose rewards are all equal gets zeros.
    """
    centered_PG = rewards_PG - rewards_PG.mean(dim=1, keepdim=True)
    if not scale_by_std:
        return centered_PG
    return centered_PG / (rewards_PG.std(dim=1, keepdim=True, unbiased=False) + eps)


@ADVANTAGES.register("grpo")
def grpo(rewards_PG: Tensor, *, cfg: AlgoConfig) -> Tensor:
    """GRPO outcome advantage (DeepSeekMath, Shao et al. 2024), same for every token."""
    return group_normalized(rewards_PG, scale_by_std=cfg.scale_by_std, eps=cfg.adv_eps)


@ADVANTAGES.register("dr_grpo")
def dr_grpo(rewards_PG: Tensor, *, cfg: AlgoConfig) -> Tensor:
    """Dr.GRPO advantage (Liu et al. 2025, "Understanding R1-Zero-Like Training"):

        A_i = r_i - mean_j r_j        (over the prompt's G samples; no std division)

    Dropping the std removes GRPO's question-difficulty bias. The paper's other
    half, the constant-length loss normaliser, is the ``seq_mean_token_sum_norm``
    aggregation. Ignores ``cfg.scale_by_std``.
    """
    return group_normalized(rewards_PG, scale_by_std=False, eps=cfg.adv_eps)


@ADVANTAGES.register("rloo")
def rloo(rewards_PG: Tensor, *, cfg: AlgoConfig) -> Tensor:
    """REINFORCE leave-one-out (Kool et al. 2019; Ahmadian et al. 2024, "Back to Basics"):

        A_i = r_i - 1/(G-1) sum_{j != i} r_j  =  G/(G-1) * (r_i - mean_j r_j)

    The baseline excludes the sample itself, so it is unbiased. No std scaling
    (as in the paper); ignores ``cfg.scale_by_std``. Needs G >= 2.
    """
    del cfg
    n = rewards_PG.shape[1]
    if n < 2:
        raise ValueError(
            f"the rloo advantage needs at least 2 samples per prompt, got rollout.n={n}"
        )
    others_mean_PG = (rewards_PG.sum(dim=1, keepdim=True) - rewards_PG) / (n - 1)
    return rewards_PG - others_mean_PG


@ADVANTAGES.register("reinforce_pp")
def reinforce_pp(rewards_PG: Tensor, *, cfg: AlgoConfig) -> Tensor:
    """REINFORCE++ (Hu 2025, "REINFORCE++"): global batch normalisation, no critic,
    no group baseline:

        A_i = (r_i - mean_batch r) / (std_batch r + eps)     over all P*G samples

    Departures from the paper: the paper normalises token-level returns that
    carry a per-token KL penalty; here rewards are outcome scores per sample
    (the KL lives in the loss, ``algo.beta``), so normalisation is over samples.
    The std is the population std (divide by P*G), as in ``group_normalized``.
    Ignores ``cfg.scale_by_std``; ``cfg.adv_eps`` is the eps.
    """
    mean = rewards_PG.mean()
    std = rewards_PG.std(unbiased=False)
    return (rewards_PG - mean) / (std + cfg.adv_eps)


@ADVANTAGES.register("reinforce_pp_baseline")
def reinforce_pp_baseline(rewards_PG: Tensor, *, cfg: AlgoConfig) -> Tensor:
    """REINFORCE++-baseline (Hu 2025): subtract the group mean, then divide by the
    batch std of the centred rewards:

        c_i = r_i - mean_group r       A_i = c_i / (std_batch c + eps)

    The batch mean of ``c`` is zero, so this is global normalisation of the
    group-centred rewards (OpenRLHF's ``reinforce_baseline``). Same departures
    as ``reinforce_pp``: per-sample outcome rewards, population std.
    """
    centered_PG = rewards_PG - rewards_PG.mean(dim=1, keepdim=True)
    return centered_PG / (centered_PG.std(unbiased=False) + cfg.adv_eps)
