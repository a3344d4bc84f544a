"""Advantage estimators: a batch's rewards (and values) -> one advantage per token.

Signature of every estimator: ``fn(inputs: AdvantageInputs, *, cfg: EstimatorParams)
-> Advantages`` (``cfg``: the ``algo`` config section, or anything with those fields).
Each is registered under its row of ``algo/traits.py``. Suffixes: B samples, T tokens, P prompts,
G samples per prompt; a batch is P groups of G consecutive samples.

Rewards come in two parts: each sample's outcome score (the reward functions,
after shaping), earned at its last generated token, and optional per-token
rewards (``-beta * KL`` when ``algo.kl_in=reward``). Outcome estimators (GRPO,
Dr.GRPO, RLOO) score a sample by the sum of both, so its tokens share one
advantage; REINFORCE++ and GAE give each token its own return.

Every std below is the population std (divide by the count) unless ``cfg.adv_std``
is ``sample`` (divide by the count - 1, as TRL and verl); a group whose rewards are
all equal gets advantages of exactly zero whichever is chosen, and so does a batch whose
returns are all equal where they are whitened (REINFORCE++, GAE).

Samples left out of training (``AdvantageInputs.valid_B`` false: a failed sample, or a
group dropped whole) get advantage 0 and are in no statistic: each group's mean, std and
leave-one-out baseline are over its valid samples, and whitening is over valid tokens.
So a group with one invalid sample gets the advantages of the same group without it::

    rewards  1  0  (failed)  1        valid  1  1  0  1
    grpo     as grpo on [1, 0, 1] (G = 3), and 0 for the failed sample
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, TypedDict

import torch
from torch import Tensor

from grouprl.algo.registry import Registry

ADVANTAGES: Registry = Registry("advantage estimator")


class EstimatorParams(Protocol):
    """The ``algo`` keys the estimators read (read-only, so ``AlgoConfig``, whose choices
    are ``Literal`` types, satisfies it)."""

    @property
    def scale_by_std(self) -> bool: ...
    @property
    def adv_std(self) -> str: ...  # "population" (divide by n) or "sample" (divide by n - 1)
    @property
    def adv_eps(self) -> float: ...
    @property
    def gamma(self) -> float: ...
    @property
    def gae_lambda(self) -> float: ...
    @property
    def turn_advantage_coef(self) -> float: ...


@dataclass
class AdvantageInputs:
    scores_B: Tensor  # outcome reward of each sample
    mask_BT: Tensor  # 1.0 on generated tokens (contiguous per row), 0.0 elsewhere
    group_size: int  # G: samples per prompt
    token_rewards_BT: Tensor | None = None  # per-token rewards besides the outcome
    values_BT: Tensor | None = None  # critic: value of the prefix before token t (gae)
    turn_index_BT: Tensor | None = None  # long: model turn of each generated token, -1 elsewhere
    turn_rewards_BK: Tensor | None = None  # the environment's reward for each model turn
    turn_counts_B: Tensor | None = None  # long: model turns of each sample (K_i <= K)
    credit_turns_B: Tensor | None = None  # long: leading turns up to the first tool result
    valid_B: Tensor | None = None  # bool: samples that train (None: all); see the module doc

    def valid(self) -> Tensor:
        """``valid_B``, all true when it is None."""
        if self.valid_B is None:
            return torch.ones_like(self.scores_B, dtype=torch.bool)
        return self.valid_B

    def valid_PG(self) -> Tensor:
        return self.valid().view(-1, self.group_size)

    def valid_mask_BT(self) -> Tensor:
        """``mask_BT`` on valid samples only."""
        return self.mask_BT * self.valid()[:, None]


@dataclass
class Advantages:
    advantages_BT: Tensor  # zero off the mask
    returns_BT: Tensor | None = None  # value targets for the critic (gae)


def _sequence_rewards(inputs: AdvantageInputs) -> Tensor:
    """Outcome score plus the sample's summed per-token rewards, as [P, G]."""
    total_B = inputs.scores_B
    if inputs.token_rewards_BT is not None:
        total_B = total_B + (inputs.token_rewards_BT * inputs.mask_BT).sum(dim=1)
    return total_B.view(-1, inputs.group_size)


def _per_token(adv_PG: Tensor, inputs: AdvantageInputs) -> Tensor:
    """One advantage per sample on each of its generated tokens (none on invalid ones)."""
    return adv_PG.reshape(-1, 1) * inputs.valid_mask_BT()


def returns_to_go(scores_B: Tensor, mask_BT: Tensor, token_rewards_BT: Tensor | None) -> Tensor:
    """Undiscounted return from each generated token on: the outcome score (earned at the
    last token, so every token sees it) plus the per-token rewards from t to the end."""
    to_go_BT = scores_B[:, None] * mask_BT
    if token_rewards_BT is not None:
        masked_BT = token_rewards_BT * mask_BT
        to_go_BT = to_go_BT + masked_BT.flip(1).cumsum(1).flip(1) * mask_BT
    return to_go_BT


def whiten(values_BT: Tensor, mask_BT: Tensor, *, eps: float, sample_std: bool = False) -> Tensor:
    """(x - mean) / (std + eps) over the masked tokens; zero off the mask. The std is the
    population std, or the sample std (divide by count - 1, as verl's ``masked_whiten``).

    Values that are all equal on the mask (a batch with one return, or no masked token)
    give exact zeros, as GRPO's all-equal groups do: float32's mean of 0.3 over a
    batch's tokens is often not 0.3, and that rounding over a std near 0 + eps gave
    advantages of about 0.029. Any other input gets the formula above, bit for bit."""
    count = mask_BT.sum().clamp(min=1)
    mean = (values_BT * mask_BT).sum() / count
    squares = (((values_BT - mean) * mask_BT) ** 2).sum()
    var = squares / (count - 1).clamp(min=1) if sample_std else squares / count
    whitened_BT = (values_BT - mean) / (var.sqrt() + eps) * mask_BT
    on_mask_BT = mask_BT > 0
    lowest = torch.where(on_mask_BT, values_BT, torch.inf).amin()
    highest = torch.where(on_mask_BT, values_BT, -torch.inf).amax()
    return torch.where(highest > lowest, whitened_BT, 0.0)


def _shifted(rewards_PG: Tensor, valid_PG: Tensor) -> Tensor:
    """Rewards minus each group's first valid reward (0 on invalid samples): the same
    centred values and std, but a group whose rewards are all equal becomes exact zeros,
    so its mean and std are exactly 0 (float32's rounding of the mean of 0.3 x G, divided
    by a std near 0 + eps, would otherwise give advantages of about 0.03)."""
    return torch.where(valid_PG, rewards_PG - _first_valid(rewards_PG, valid_PG), 0.0)


def _first_valid(values_PG: Tensor, valid_PG: Tensor) -> Tensor:
    """Each group's value at its first valid sample, ``[P, 1]`` (its first sample's in a
    group with none)."""
    return values_PG.gather(1, valid_PG.int().argmax(dim=1, keepdim=True))


def _group_moments(
    shifted_PG: Tensor, valid_PG: Tensor, *, sample_std: bool
) -> tuple[Tensor, Tensor]:
    """Mean and std ``[P, 1]`` of each group's valid values (``shifted_PG``: 0 elsewhere);
    the std divides by the count, or by the count - 1 with ``sample_std``."""
    count_P1 = valid_PG.sum(dim=1, keepdim=True)
    mean_P1 = shifted_PG.sum(dim=1, keepdim=True) / count_P1.clamp(min=1)
    squares_P1 = torch.where(valid_PG, shifted_PG - mean_P1, 0.0).square().sum(1, keepdim=True)
    divisor_P1 = (count_P1 - 1 if sample_std else count_P1).clamp(min=1)
    return mean_P1, (squares_P1 / divisor_P1).sqrt()


def group_normalized(
    rewards_PG: Tensor,
    *,
    scale_by_std: bool,
    eps: float,
    sample_std: bool = False,
    valid_PG: Tensor | None = None,
) -> Tensor:
    """Reward minus the group mean, optionally divided by the group std + eps, over each
    group's valid samples (``valid_PG``, bool; None: all); 0 on the others.

    The std is the population std (``unbiased=False``, divide by G) unless
    ``sample_std``; TRL and verl use the sample std (``torch.std``, divide by
    G - 1). With the population std each group's advantages have unit variance
    exactly: one success among G binary rewards scores +sqrt(G - 1), each failure
    -1/sqrt(G - 1). A group whose rewards are all equal gets exact zeros.
    """
    if valid_PG is None:
        valid_PG = torch.ones_like(rewards_PG, dtype=torch.bool)
    shifted_PG = _shifted(rewards_PG, valid_PG)
    mean_P1, std_P1 = _group_moments(shifted_PG, valid_PG, sample_std=sample_std)
    centered_PG = torch.where(valid_PG, shifted_PG - mean_P1, 0.0)
    if not scale_by_std:
        return centered_PG
    return centered_PG / (std_P1 + eps)


class _GroupParams(TypedDict):
    scale_by_std: bool
    eps: float
    sample_std: bool
    valid_PG: Tensor


def _group_params(cfg: EstimatorParams, inputs: AdvantageInputs) -> _GroupParams:
    return {
        "scale_by_std": cfg.scale_by_std,
        "eps": cfg.adv_eps,
        "sample_std": _sample(cfg),
        "valid_PG": inputs.valid_PG(),
    }


def _sample(cfg: EstimatorParams) -> bool:
    return cfg.adv_std == "sample"


@ADVANTAGES.register("grpo")
def grpo(inputs: AdvantageInputs, *, cfg: EstimatorParams) -> Advantages:
    """GRPO outcome advantage (DeepSeekMath, Shao et al. 2024), same for every token:

        A_i = (R_i - mean_j R_j) / (std_j R_j + eps)     over the prompt's G samples

    ``std`` is dropped when ``cfg.scale_by_std`` is false; ``cfg.adv_std`` picks the
    population (default) or sample std, ``cfg.adv_eps`` is eps (TRL: sample, 1e-4;
    verl: sample, 1e-6). R_i is the outcome score plus the sample's summed per-token
    rewards.
    """
    adv_PG = group_normalized(_sequence_rewards(inputs), **_group_params(cfg, inputs))
    return Advantages(_per_token(adv_PG, inputs))


@ADVANTAGES.register("dr_grpo")
def dr_grpo(inputs: AdvantageInputs, *, cfg: EstimatorParams) -> Advantages:
    """Dr.GRPO advantage (Liu et al. 2025, "Understanding R1-Zero-Like Training"):

        A_i = R_i - mean_j R_j        (over the prompt's G samples; no std division)

    Dropping the std removes GRPO's question-difficulty bias. The paper's other
    half, the constant-length loss normaliser, is the ``seq_mean_token_sum_norm``
    aggregation. Ignores ``cfg.scale_by_std``.
    """
    adv_PG = group_normalized(
        _sequence_rewards(inputs), scale_by_std=False, eps=cfg.adv_eps, valid_PG=inputs.valid_PG()
    )
    return Advantages(_per_token(adv_PG, inputs))


@ADVANTAGES.register("rloo")
def rloo(inputs: AdvantageInputs, *, cfg: EstimatorParams) -> Advantages:
    """REINFORCE leave-one-out (Kool et al. 2019; Ahmadian et al. 2024, "Back to Basics"):

        A_i = R_i - 1/(G-1) sum_{j != i} R_j  =  G/(G-1) * (R_i - mean_j R_j)

    The baseline excludes the sample itself, so it is unbiased. No std scaling
    (as in the paper); ignores ``cfg.scale_by_std``. Needs G >= 2 (G: the group's
    valid samples).
    """
    del cfg
    valid_PG = inputs.valid_PG()
    rewards_PG = _shifted(_sequence_rewards(inputs), valid_PG)  # the baseline cancels it
    if rewards_PG.shape[1] < 2:
        raise ValueError(
            "the rloo advantage needs at least 2 samples per prompt, got "
            f"rollout.n={rewards_PG.shape[1]}"
        )
    others_P1 = (valid_PG.sum(dim=1, keepdim=True) - 1).clamp(min=1)
    others_mean_PG = (rewards_PG.sum(dim=1, keepdim=True) - rewards_PG) / others_P1
    return Advantages(_per_token(rewards_PG - others_mean_PG, inputs))


@ADVANTAGES.register("reinforce_pp")
def reinforce_pp(inputs: AdvantageInputs, *, cfg: EstimatorParams) -> Advantages:
    """REINFORCE++ (Hu 2025, "REINFORCE++"): no critic and no group baseline; each
    token's return, whitened over every generated token of the batch:

        G_t = score + sum_{s >= t} r_s          (r_s: per-token rewards, e.g. -beta * KL)
        A_t = (G_t - mean_batch G) / (std_batch G + eps)

    With no per-token rewards every token of a sample has the same return, so this is
    a token-weighted batch normalisation of the scores (long samples count more in
    the mean, as in the paper and OpenRLHF). ``cfg.adv_std`` picks the std (verl's
    ``masked_whiten``: sample), ``cfg.adv_eps`` is eps. Works with any group size,
    including 1. Departure from verl: no discount (``algo.gamma`` must stay 1).
    """
    mask_BT = inputs.valid_mask_BT()
    to_go_BT = returns_to_go(inputs.scores_B, mask_BT, inputs.token_rewards_BT)
    return Advantages(whiten(to_go_BT, mask_BT, eps=cfg.adv_eps, sample_std=_sample(cfg)))


@ADVANTAGES.register("reinforce_pp_baseline")
def reinforce_pp_baseline(inputs: AdvantageInputs, *, cfg: EstimatorParams) -> Advantages:
    """REINFORCE++-baseline (Hu 2025): subtract the group mean from the scores, then
    as ``reinforce_pp``:

        c_i = score_i - mean_group score      G_t = c_i + sum_{s >= t} r_s
        A_t = (G_t - mean_batch G) / (std_batch G + eps)

    (OpenRLHF's ``reinforce_baseline``). Needs G >= 2 to be useful.
    """
    scores_PG = inputs.scores_B.view(-1, inputs.group_size)
    centered_PG = group_normalized(
        scores_PG, scale_by_std=False, eps=cfg.adv_eps, valid_PG=inputs.valid_PG()
    )
    mask_BT = inputs.valid_mask_BT()
    to_go_BT = returns_to_go(centered_PG.flatten(), mask_BT, inputs.token_rewards_BT)
    return Advantages(whiten(to_go_BT, mask_BT, eps=cfg.adv_eps, sample_std=_sample(cfg)))


@ADVANTAGES.register("gae")
def gae(inputs: AdvantageInputs, *, cfg: EstimatorParams) -> Advantages:
    """Generalised advantage estimation (Schulman et al. 2015) over each sample's
    generated tokens, with the critic's values V_t (of the prefix before token t):

        r_t     = per-token reward at t, plus the score at the last token
        delta_t = r_t + gamma * V_{t'} - V_t           (t': the next generated token;
        A_t     = delta_t + gamma * lambda * A_{t'}     V and A after the last one = 0)
        returns = A_t + V_t                            (the critic's targets)

    The recursion runs over generated tokens only: in a multi-turn row the masked
    tool-reply tokens between two model turns are skipped, not discounted, so the
    last token of turn k links to the first token of turn k + 1 and the final score
    reaches every turn (as verl's ``compute_gae_advantage_return``)::

        mask    0  1  1  0  0  0  1  1      (prompt, turn 1, tool reply, turn 2)
        gamma = lambda = 1, V = 0, score 1:
        returns .  1  1  .  .  .  1  1

    Advantages are then whitened over the batch's generated tokens (as PPO
    implementations do; the returns are not). ``cfg.gamma``, ``cfg.gae_lambda``.
    Invalid samples get advantages and returns of 0.
    """
    if inputs.values_BT is None:
        raise ValueError("the gae advantage needs the critic's values (a `critic:` section)")
    mask_BT = inputs.valid_mask_BT()
    values_BT = inputs.values_BT * mask_BT
    rewards_BT = torch.zeros_like(values_BT)
    if inputs.token_rewards_BT is not None:
        rewards_BT = inputs.token_rewards_BT * mask_BT
    last_B = _last_index(mask_BT)
    rows_B = torch.arange(mask_BT.shape[0], device=mask_BT.device)
    rewards_BT[rows_B, last_B] += inputs.scores_B * mask_BT[rows_B, last_B]
    adv_BT = torch.zeros_like(values_BT)
    running_B = torch.zeros_like(inputs.scores_B)  # A at the next generated token
    next_value_B = torch.zeros_like(inputs.scores_B)  # V at the next generated token
    for t in reversed(range(mask_BT.shape[1])):
        generated_B = mask_BT[:, t] > 0
        delta_B = rewards_BT[:, t] + cfg.gamma * next_value_B - values_BT[:, t]
        step_B = delta_B + cfg.gamma * cfg.gae_lambda * running_B
        running_B = torch.where(generated_B, step_B, running_B)  # masked: carried over
        next_value_B = torch.where(generated_B, values_BT[:, t], next_value_B)
        adv_BT[:, t] = running_B
    adv_BT = adv_BT * mask_BT
    returns_BT = (adv_BT + values_BT) * mask_BT
    whitened_BT = whiten(adv_BT, mask_BT, eps=cfg.adv_eps, sample_std=_sample(cfg))
    return Advantages(whitened_BT, returns_BT=returns_BT)


def _last_index(mask_BT: Tensor) -> Tensor:
    """Column of each row's last masked token (0 for a row with none)."""
    columns_BT = torch.arange(mask_BT.shape[1], device=mask_BT.device).expand_as(mask_BT)
    return torch.where(mask_BT.bool(), columns_BT, 0).amax(dim=1)


def _turn_inputs(inputs: AdvantageInputs, name: str, extra: Tensor | None) -> tuple[Tensor, ...]:
    """The turn tensors ``name`` reads: the turn of each token, the turn rewards, and
    ``extra`` (the one more it needs)."""
    if inputs.turn_index_BT is None or inputs.turn_rewards_BK is None or extra is None:
        raise ValueError(f"the {name} advantage needs the episodes' turns and turn rewards")
    return inputs.turn_index_BT, inputs.turn_rewards_BK, extra


@ADVANTAGES.register("mt_grpo")
def mt_grpo(inputs: AdvantageInputs, *, cfg: EstimatorParams) -> Advantages:
    """MT-GRPO (Zeng et al. 2025, "Reinforcing Multi-Turn Reasoning in LLM Agents via
    Turn-Level Credit Assignment"): GRPO's outcome advantage on every model token, plus
    a group-normalised turn advantage on the turns up to the first tool result:

        A^O_i = groupnorm(score)_i         A^T_i = groupnorm(T)_i
        A_i,t = A^O_i + c * A^T_i   if token t is in turns 0 .. credit_turns_i - 1
        A_i,t = A^O_i               otherwise

    T_i is the sum of sample i's turn rewards over those turns (e.g. "the search
    ran and returned a passage with an answer alias"); c is
    ``cfg.turn_advantage_coef``. With c = 0 this is ``grpo``. Departure: the paper
    credits exactly the first turn; here the credited turns end with the first
    turn whose tool call returned (the same turn when the model searches at once).
    """
    turn_BT, turn_rewards_BK, credit_B = _turn_inputs(inputs, "mt_grpo", inputs.credit_turns_B)
    group = _group_params(cfg, inputs)
    outcome_PG = group_normalized(_sequence_rewards(inputs), **group)
    turns_K = torch.arange(turn_rewards_BK.shape[1], device=turn_rewards_BK.device)
    credited_BK = turns_K[None, :] < credit_B[:, None]
    turn_score_B = (turn_rewards_BK * credited_BK).sum(dim=1)
    turn_PG = group_normalized(turn_score_B.view(-1, inputs.group_size), **group)
    in_credit_BT = (turn_BT >= 0) & (turn_BT < credit_B[:, None])
    adv_BT = _per_token(outcome_PG, inputs)
    adv_BT = adv_BT + cfg.turn_advantage_coef * turn_PG.reshape(-1, 1) * in_credit_BT
    return Advantages(adv_BT * inputs.valid_mask_BT())


@ADVANTAGES.register("turn_returns")
def turn_returns(inputs: AdvantageInputs, *, cfg: EstimatorParams) -> Advantages:
    """Discounted per-turn returns, with the group's episode returns as the baseline:

        G_i,k = sum_{j >= k} gamma^(j - k) r_i,j  +  gamma^(K_i - 1 - k) * score_i
        A_i,t = (G_i,k(t) - mean_group G_0) / (std_group G_0 + eps)

    where r_i,j are sample i's turn rewards, K_i its number of turns, k(t) the
    turn of token t and gamma ``cfg.gamma`` (per turn). A later turn is judged by
    what followed it, against what whole episodes of the same prompt earned. With
    gamma = 1 and no turn rewards this is ``grpo``.
    """
    turn_BT, turn_rewards_BK, counts_B = _turn_inputs(inputs, "turn_returns", inputs.turn_counts_B)
    B, K = turn_rewards_BK.shape
    returns_BK = torch.zeros_like(turn_rewards_BK)
    running_B = inputs.scores_B.clone()  # the outcome arrives after the last turn
    for k in reversed(range(K)):
        alive_B = k < counts_B
        later_B = torch.where(k + 1 < counts_B, cfg.gamma * running_B, running_B)
        running_B = torch.where(alive_B, turn_rewards_BK[:, k] + later_B, running_B)
        returns_BK[:, k] = torch.where(alive_B, running_B, 0.0)
    episode_PG, valid_PG = returns_BK[:, 0].view(-1, inputs.group_size), inputs.valid_PG()
    first_P1 = _first_valid(episode_PG, valid_PG)  # shifted by it, equal episodes centre
    shifted_PG = _shifted(episode_PG, valid_PG)  # to exact 0
    mean_P1, std_P1 = _group_moments(shifted_PG, valid_PG, sample_std=_sample(cfg))
    adv_PGK = returns_BK.view(-1, inputs.group_size, K) - first_P1[:, :, None]
    adv_PGK = adv_PGK - mean_P1[:, :, None]
    if cfg.scale_by_std:
        adv_PGK = adv_PGK / (std_P1[:, :, None] + cfg.adv_eps)
    adv_BT = adv_PGK.reshape(B, K).gather(1, turn_BT.clamp(min=0))
    return Advantages(adv_BT * inputs.valid_mask_BT() * (turn_BT >= 0))
