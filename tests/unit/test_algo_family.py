"""The GRPO family's estimators, losses and aggregations against hand-worked values.

Suffixes: B samples, T tokens, P prompts, G group.
"""

import math

import pydantic
import pytest
import torch

from grouprl.algo.advantages import ADVANTAGES, AdvantageInputs
from grouprl.algo.aggregate import AGGREGATIONS, LossNorm
from grouprl.algo.losses import POLICY_LOSSES
from grouprl.algo.objective import micro_batch_loss
from grouprl.config.algo_section import AlgoConfig

EXACT = AlgoConfig(adv_eps=0.0)


def per_sample(name: str, rewards_PG: torch.Tensor, cfg: AlgoConfig) -> torch.Tensor:
    """An outcome estimator's advantages as [P, G], each sample one generated token."""
    P, G = rewards_PG.shape
    inputs = AdvantageInputs(
        scores_B=rewards_PG.flatten(), mask_BT=torch.ones(P * G, 1), group_size=G
    )
    return ADVANTAGES[name](inputs, cfg=cfg).advantages_BT.view(P, G)


# --- advantages -----------------------------------------------------------------


def test_dr_grpo_centres_without_std():
    rewards_PG = torch.tensor([[2.0, 0.0, 1.0], [3.0, 3.0, 3.0]])
    adv = per_sample("dr_grpo", rewards_PG, AlgoConfig(scale_by_std=True))
    torch.testing.assert_close(adv, torch.tensor([[1.0, -1.0, 0.0], [0.0, 0.0, 0.0]]))


def test_rloo_leave_one_out_baseline():
    # success: 1 - mean(0, 0, 0) = 1; failure: 0 - mean(1, 0, 0) = -1/3
    adv = per_sample("rloo", torch.tensor([[1.0, 0.0, 0.0, 0.0]]), EXACT)
    torch.testing.assert_close(adv, torch.tensor([[1.0, -1 / 3, -1 / 3, -1 / 3]]))
    # 3 - mean(1, 2) = 1.5; 1 - mean(3, 2) = -1.5; 2 - mean(3, 1) = 0
    adv = per_sample("rloo", torch.tensor([[3.0, 1.0, 2.0]]), EXACT)
    torch.testing.assert_close(adv, torch.tensor([[1.5, -1.5, 0.0]]))


def test_rloo_refuses_groups_of_one():
    with pytest.raises(ValueError, match="at least 2 samples"):
        per_sample("rloo", torch.tensor([[1.0], [0.0]]), EXACT)


def test_reinforce_pp_normalises_over_the_whole_batch():
    # batch of 4: mean 1/4, population std sqrt(3)/4. The all-zero group still gets
    # a (negative) advantage: the baseline is the batch, not the group.
    adv = per_sample("reinforce_pp", torch.tensor([[1.0, 0.0], [0.0, 0.0]]), EXACT)
    s = 1 / math.sqrt(3)
    torch.testing.assert_close(adv, torch.tensor([[math.sqrt(3), -s], [-s, -s]]))


def test_reinforce_pp_baseline_centres_per_group_then_scales_by_batch_std():
    # centred: [[0.5, -0.5], [0, 0]]; batch population std of that: sqrt(0.5 / 4)
    # (the raw rewards' std, sqrt(0.6875), would give a different answer)
    adv = per_sample("reinforce_pp_baseline", torch.tensor([[1.0, 0.0], [2.0, 2.0]]), EXACT)
    r2 = math.sqrt(2)
    torch.testing.assert_close(adv, torch.tensor([[r2, -r2], [0.0, 0.0]]))


# --- ppo_clip with dual clip ----------------------------------------------------


@pytest.mark.parametrize(
    ("ratio", "adv", "loss", "clipped", "grad"),
    [
        (5.0, -1.0, 3.0, True, 0.0),  # -A * ratio = 5 capped at -c * A = 3
        (2.0, -1.0, 2.0, False, 2.0),  # below the cap: ordinary PPO, d(-rA)/dlogp = 2
        (5.0, 1.0, -1.2, True, 0.0),  # positive A: the cap does not apply
        (0.5, -1.0, 0.8, True, 0.0),  # lower clip unchanged
        (5.0, -2.0, 6.0, True, 0.0),  # cap scales with |A|: 3 * 2
    ],
)
def test_ppo_dual_clip(ratio, adv, loss, clipped, grad):
    old = torch.zeros(1, 1)
    new = (old + math.log(ratio)).requires_grad_()
    out = POLICY_LOSSES["ppo_clip"](
        logprobs_BT=new,
        old_logprobs_BT=old,
        advantages_BT=torch.tensor([[adv]]),
        loss_mask_BT=torch.ones(1, 1),
        cfg=AlgoConfig(clip_eps_low=0.2, clip_eps_high=0.2, dual_clip_c=3.0),
    )
    assert out.loss_BT.item() == pytest.approx(loss, abs=1e-6)
    assert bool(out.clipped_BT.item()) is clipped
    out.loss_BT.sum().backward()
    assert new.grad.item() == pytest.approx(grad, abs=1e-6)


def test_dual_clip_must_exceed_one():
    with pytest.raises(pydantic.ValidationError):
        AlgoConfig(dual_clip_c=1.0)


# --- GSPO -----------------------------------------------------------------------


def _gspo_batch():
    """Two sequences: tokens 0-1 of row 0 (the third is padding with a wild
    ratio that must be ignored) and all three tokens of row 1."""
    old_BT = torch.full((2, 3), -1.0)
    diff_BT = torch.tensor([[0.1, -0.3, 5.0], [0.5, 0.5, 0.2]])
    mask_BT = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    adv_BT = torch.tensor([[2.0, 2.0, 2.0], [1.0, 1.0, 1.0]])
    return old_BT, diff_BT, mask_BT, adv_BT


def test_gspo_sequence_ratio_and_clip_by_hand():
    old_BT, diff_BT, mask_BT, adv_BT = _gspo_batch()
    out = POLICY_LOSSES["gspo"](
        logprobs_BT=old_BT + diff_BT,
        old_logprobs_BT=old_BT,
        advantages_BT=adv_BT,
        loss_mask_BT=mask_BT,
        cfg=AlgoConfig(clip_eps_low=0.2, clip_eps_high=0.2),
    )
    # row 0: s = exp((0.1 - 0.3) / 2) = exp(-0.1), inside the range: -2 * s
    # row 1: s = exp(1.2 / 3) = exp(0.4) > 1.2, clipped: -1.2 * 1
    row0 = -2 * math.exp(-0.1)
    expected = torch.tensor([[row0, row0, row0], [-1.2, -1.2, -1.2]])
    torch.testing.assert_close(out.loss_BT, expected)
    assert out.clipped_BT.tolist() == [[False, False, False], [True, True, True]]


def test_gspo_paper_clip_range_is_tiny():
    # a log-ratio of 1e-3 per token is far past 1 + 4e-4
    old_BT = torch.zeros(1, 2)
    out = POLICY_LOSSES["gspo"](
        logprobs_BT=old_BT + 1e-3,
        old_logprobs_BT=old_BT,
        advantages_BT=torch.full((1, 2), 0.5),
        loss_mask_BT=torch.ones(1, 2),
        cfg=AlgoConfig(clip_eps_low=3e-4, clip_eps_high=4e-4),
    )
    torch.testing.assert_close(out.loss_BT, torch.full((1, 2), -0.5 * 1.0004))
    assert out.clipped_BT.all()


def test_gspo_gradient_by_hand():
    # seq_mean_token_mean over N = 2 sequences: row 0 contributes -A s / N, and
    # d s / d logp_t = s / |y| for each of its |y| = 2 tokens, so the gradient is
    # -2 * exp(-0.1) / (2 * 2); clipped row 1 and the padding get none.
    old_BT, diff_BT, mask_BT, adv_BT = _gspo_batch()
    logp_BT = (old_BT + diff_BT).requires_grad_()
    out = POLICY_LOSSES["gspo"](
        logprobs_BT=logp_BT,
        old_logprobs_BT=old_BT,
        advantages_BT=adv_BT,
        loss_mask_BT=mask_BT,
        cfg=AlgoConfig(),
    )
    norm = LossNorm(tokens=5, sequences=2)
    AGGREGATIONS["seq_mean_token_mean"](out.loss_BT, mask_BT, norm=norm).backward()
    g = -2 * math.exp(-0.1) / 4
    torch.testing.assert_close(logp_BT.grad, torch.tensor([[g, g, 0.0], [0.0, 0.0, 0.0]]))


@pytest.mark.parametrize("agg", ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"])
def test_gspo_token_equals_gspo_for_sequence_advantages(agg):
    old_BT, diff_BT, mask_BT, adv_BT = _gspo_batch()
    diff_BT[1] = torch.tensor([0.05, -0.05, 0.03])  # keep row 1 unclipped too
    norm = LossNorm(tokens=5, sequences=2, constant_tokens=4)
    results = {}
    for name in ("gspo", "gspo_token"):
        logp_BT = (old_BT + diff_BT).requires_grad_()
        out = POLICY_LOSSES[name](
            logprobs_BT=logp_BT,
            old_logprobs_BT=old_BT,
            advantages_BT=adv_BT,
            loss_mask_BT=mask_BT,
            cfg=AlgoConfig(),
        )
        loss = AGGREGATIONS[agg](out.loss_BT, mask_BT, norm=norm)
        loss.backward()
        results[name] = (out.loss_BT * mask_BT, loss, logp_BT.grad)
    for a, b in zip(results["gspo"], results["gspo_token"], strict=True):
        torch.testing.assert_close(a, b)
    assert results["gspo"][2].abs().sum() > 0  # the comparison is not 0 == 0


def test_gspo_token_per_token_advantages_by_hand():
    # s = exp(mean(0.1, -0.1)) = 1; advantages +1 and -1 per token.
    # loss_t = -s * A_t; grad_t = -A_t * s / tokens (token_mean, 2 tokens).
    # gspo would average the advantages to 0 and learn nothing here.
    old_BT = torch.zeros(1, 2)
    logp_BT = (old_BT + torch.tensor([[0.1, -0.1]])).requires_grad_()
    out = POLICY_LOSSES["gspo_token"](
        logprobs_BT=logp_BT,
        old_logprobs_BT=old_BT,
        advantages_BT=torch.tensor([[1.0, -1.0]]),
        loss_mask_BT=torch.ones(1, 2),
        cfg=AlgoConfig(),
    )
    torch.testing.assert_close(out.loss_BT.detach(), torch.tensor([[-1.0, 1.0]]))
    norm = LossNorm(tokens=2, sequences=1)
    AGGREGATIONS["token_mean"](out.loss_BT, torch.ones(1, 2), norm=norm).backward()
    torch.testing.assert_close(logp_BT.grad, torch.tensor([[-0.5, 0.5]]))


def test_objective_passes_the_mask_to_sequence_losses():
    old_BT, diff_BT, mask_BT, adv_BT = _gspo_batch()
    loss, metrics = micro_batch_loss(
        logprobs_BT=old_BT + diff_BT,
        old_logprobs_BT=old_BT,
        ref_logprobs_BT=None,
        engine_logprobs_BT=old_BT,
        advantages_BT=adv_BT,
        loss_mask_BT=mask_BT.bool(),
        norm=LossNorm(tokens=5, sequences=2),
        cfg=AlgoConfig(policy_loss="gspo", loss_agg="seq_mean_token_mean"),
        beta=0.0,
    )
    assert loss.item() == pytest.approx((-2 * math.exp(-0.1) - 1.2) / 2)
    assert metrics["clip_frac"].item() == pytest.approx(3 / 5)  # row 1's three tokens


# --- aggregations ---------------------------------------------------------------


def test_aggregations_by_hand():
    values_BT = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask_BT = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 1.0]])
    norm = LossNorm(tokens=3, sequences=2, constant_tokens=4)
    # tokens: (1 + 5 + 6) / 3; sequences: (1 + 5.5) / 2; Dr.GRPO: (1 + 11) / (2 * 4)
    assert AGGREGATIONS["token_mean"](values_BT, mask_BT, norm=norm).item() == 4.0
    assert AGGREGATIONS["seq_mean_token_mean"](values_BT, mask_BT, norm=norm).item() == 3.25
    assert AGGREGATIONS["seq_mean_token_sum_norm"](values_BT, mask_BT, norm=norm).item() == 1.5


def test_dr_grpo_aggregation_needs_the_constant():
    with pytest.raises(ValueError, match="constant_tokens"):
        AGGREGATIONS["seq_mean_token_sum_norm"](
            torch.ones(1, 1), torch.ones(1, 1), norm=LossNorm(tokens=1, sequences=1)
        )


@pytest.mark.parametrize(
    ("agg", "expected"),
    [
        ("token_mean", 48 / 8),  # token sum 48 over 8 tokens
        ("seq_mean_token_mean", (2 + 4 + 8.5 + 10.5) / 4),
        ("seq_mean_token_sum_norm", 48 / (4 * 3)),
    ],
)
def test_aggregation_does_not_depend_on_the_micro_batch_split(agg, expected):
    values_BT = torch.arange(1.0, 13.0).reshape(4, 3)
    mask_BT = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    norm = LossNorm(tokens=8, sequences=4, constant_tokens=3)
    fn = AGGREGATIONS[agg]
    whole = fn(values_BT, mask_BT, norm=norm)
    assert whole.item() == pytest.approx(expected)
    for cut in (1, 2, 3):
        parts = fn(values_BT[:cut], mask_BT[:cut], norm=norm) + fn(
            values_BT[cut:], mask_BT[cut:], norm=norm
        )
        assert parts.item() == pytest.approx(expected)
