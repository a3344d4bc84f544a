"""PPO (GAE, value clipping), KL in the reward and its controller, DAPO's pieces and
truncated importance sampling, against values worked out by hand.

Suffixes: B samples, T tokens.
"""

import math
import statistics

import pytest
import torch

from grouprl.algo.advantages import ADVANTAGES, AdvantageInputs, whiten
from grouprl.algo.aggregate import LossNorm
from grouprl.algo.kl import adaptive_kl_coef
from grouprl.algo.objective import micro_batch_loss
from grouprl.algo.shaping import overlong_penalty
from grouprl.algo.value import clipped_value_loss
from grouprl.config.algo_section import AlgoConfig
from grouprl.driver.batch import build_batch
from grouprl.types import Completion, Trajectory, Turn

# row 0: prompt at column 0, three generated tokens; row 1: one generated token
MASK_BT = torch.tensor([[0.0, 1.0, 1.0, 1.0], [0.0, 1.0, 0.0, 0.0]])


def _population_whiten(values: list[float]) -> list[float]:
    mean, std = statistics.fmean(values), statistics.pstdev(values)
    return [(v - mean) / std for v in values]


def test_gae_with_gamma_and_lambda_one_is_return_minus_value():
    values_BT = torch.tensor([[9.0, 0.5, 0.2, 0.4], [9.0, 0.3, 9.0, 9.0]])  # 9s: off the mask
    out = ADVANTAGES["gae"](
        AdvantageInputs(
            scores_B=torch.tensor([1.0, 0.0]), mask_BT=MASK_BT, group_size=1, values_BT=values_BT
        ),
        cfg=AlgoConfig(advantage="gae", adv_eps=0.0),
    )
    # A_t = R - V_t: 0.5, 0.8, 0.6 and -0.3; returns are the outcome, 1 and 0
    torch.testing.assert_close(out.returns_BT, torch.tensor([[0, 1, 1, 1], [0, 0, 0, 0.0]]))
    expected = _population_whiten([0.5, 0.8, 0.6, -0.3])
    got = out.advantages_BT[MASK_BT.bool()].tolist()
    assert got == pytest.approx(expected, abs=1e-6)
    assert torch.all(out.advantages_BT[~MASK_BT.bool()] == 0)


def test_gae_discounts_by_hand():
    # gamma = lambda = 0.5, V = (0.5, 0.2, 0.4), reward 1 at the last token:
    # delta_3 = 1 - 0.4 = 0.6                 A_3 = 0.6
    # delta_2 = 0.5 * 0.4 - 0.2 = 0           A_2 = 0 + 0.25 * 0.6 = 0.15
    # delta_1 = 0.5 * 0.2 - 0.5 = -0.4        A_1 = -0.4 + 0.25 * 0.15 = -0.3625
    values_BT = torch.tensor([[0.0, 0.5, 0.2, 0.4]])
    out = ADVANTAGES["gae"](
        AdvantageInputs(
            scores_B=torch.tensor([1.0]), mask_BT=MASK_BT[:1], group_size=1, values_BT=values_BT
        ),
        cfg=AlgoConfig(advantage="gae", gamma=0.5, gae_lambda=0.5, adv_eps=0.0),
    )
    raw = [-0.3625, 0.15, 0.6]
    torch.testing.assert_close(
        out.returns_BT, torch.tensor([[0.0, -0.3625 + 0.5, 0.15 + 0.2, 0.6 + 0.4]])
    )
    assert out.advantages_BT[0, 1:].tolist() == pytest.approx(_population_whiten(raw), abs=1e-6)


def test_gae_needs_values():
    with pytest.raises(ValueError, match="critic"):
        ADVANTAGES["gae"](
            AdvantageInputs(scores_B=torch.ones(2), mask_BT=MASK_BT, group_size=1),
            cfg=AlgoConfig(advantage="gae"),
        )


def test_reinforce_pp_token_returns_with_kl_rewards():
    # row 0: score 1, per-token rewards -0.1, -0.2, -0.3 -> returns to go 0.4, 0.5, 0.7
    # row 1: score 0, per-token reward -0.1 -> -0.1; whitened over all four tokens
    token_rewards_BT = torch.tensor([[5.0, -0.1, -0.2, -0.3], [5.0, -0.1, 5.0, 5.0]])
    out = ADVANTAGES["reinforce_pp"](
        AdvantageInputs(
            scores_B=torch.tensor([1.0, 0.0]),
            mask_BT=MASK_BT,
            group_size=1,
            token_rewards_BT=token_rewards_BT,
        ),
        cfg=AlgoConfig(adv_eps=0.0),
    )
    got = out.advantages_BT[MASK_BT.bool()].tolist()
    assert got == pytest.approx(_population_whiten([0.4, 0.5, 0.7, -0.1]), abs=1e-6)


def test_reinforce_pp_weighs_long_samples_more():
    # no per-token rewards: every token carries its sample's score; 3 tokens of 1, 1 of 0
    out = ADVANTAGES["reinforce_pp"](
        AdvantageInputs(scores_B=torch.tensor([1.0, 0.0]), mask_BT=MASK_BT, group_size=1),
        cfg=AlgoConfig(adv_eps=0.0),
    )
    expected = _population_whiten([1.0, 1.0, 1.0, 0.0])
    assert out.advantages_BT[MASK_BT.bool()].tolist() == pytest.approx(expected, abs=1e-6)


def test_outcome_estimators_add_the_summed_token_rewards():
    # sample totals: 1 - 0.6 = 0.4 and 0 - 0.1 = -0.1; one group of two: +-0.25 (dr_grpo)
    token_rewards_BT = torch.tensor([[0.0, -0.1, -0.2, -0.3], [0.0, -0.1, 0.0, 0.0]])
    out = ADVANTAGES["dr_grpo"](
        AdvantageInputs(
            scores_B=torch.tensor([1.0, 0.0]),
            mask_BT=MASK_BT,
            group_size=2,
            token_rewards_BT=token_rewards_BT,
        ),
        cfg=AlgoConfig(),
    )
    torch.testing.assert_close(
        out.advantages_BT, torch.tensor([[0.0, 0.25, 0.25, 0.25], [0.0, -0.25, 0.0, 0.0]])
    )


def test_whiten_ignores_tokens_off_the_mask():
    x_BT = torch.tensor([[100.0, 1.0, 3.0]])
    torch.testing.assert_close(
        whiten(x_BT, torch.tensor([[0.0, 1.0, 1.0]]), eps=0.0), torch.tensor([[0.0, -1.0, 1.0]])
    )


@pytest.mark.parametrize(
    ("value", "old", "ret", "loss", "clipped", "grad"),
    [
        # moved 0.5 up, clip 0.2 -> clipped value 1.2; max(0.25, 0.64) / 2, no gradient
        (1.5, 1.0, 2.0, 0.32, True, 0.0),
        # moved 0.1, inside the clip: (0.9 - 2)^2 / 2, gradient 0.9 - 2
        (0.9, 1.0, 2.0, 0.605, False, -1.1),
        # moved 1.0 away from the target: the unclipped error is the larger and counts fully
        (0.0, 1.0, 2.0, 2.0, False, -2.0),
    ],
)
def test_clipped_value_loss_by_hand(value, old, ret, loss, clipped, grad):
    v = torch.tensor([[value]], requires_grad=True)
    out, was_clipped = clipped_value_loss(
        values_BT=v, old_values_BT=torch.tensor([[old]]), returns_BT=torch.tensor([[ret]]), clip=0.2
    )
    out.sum().backward()
    assert out.item() == pytest.approx(loss)
    assert bool(was_clipped) is clipped
    assert v.grad.item() == pytest.approx(grad)


def test_value_loss_without_clip_is_half_squared_error():
    out, clipped = clipped_value_loss(
        values_BT=torch.tensor([[3.0]]),
        old_values_BT=torch.tensor([[0.0]]),
        returns_BT=torch.tensor([[1.0]]),
        clip=None,
    )
    assert out.item() == 2.0 and not clipped.any()


@pytest.mark.parametrize(
    ("length", "factor", "expected"),
    [(40, 1.0, 0.0), (48, 1.0, 0.0), (56, 1.0, -0.5), (64, 1.0, -1.0), (60, 0.5, -0.375)],
)
def test_overlong_penalty_by_hand(length, factor, expected):
    # L_max 64, L_cache 16: free up to 48 tokens, then linear to -factor at 64
    assert overlong_penalty(length, max_tokens=64, buffer=16, factor=factor) == pytest.approx(
        expected
    )


def test_adaptive_kl_controller_by_hand():
    # KL 50% above target: the error is clipped to 0.2; 128 samples over a 10k horizon
    up = adaptive_kl_coef(0.1, observed_kl=0.15, target=0.1, horizon=10_000, n_samples=128)
    assert up == pytest.approx(0.1 * (1 + 0.2 * 128 / 10_000))
    down = adaptive_kl_coef(0.1, observed_kl=0.09, target=0.1, horizon=10_000, n_samples=128)
    assert down == pytest.approx(0.1 * (1 - 0.1 * 128 / 10_000))


def test_truncated_importance_weights_scale_the_policy_loss():
    # ratio 1 (logp = old) so the ppo loss is -A; trainer/engine ratios 3 (capped at 2)
    # and exp(-0.5): loss = (-1 * 2 + -1 * exp(-0.5)) / 2 tokens
    old_BT = torch.zeros(1, 2)
    engine_BT = torch.tensor([[-math.log(3), 0.5]])
    loss, metrics = micro_batch_loss(
        logprobs_BT=old_BT.clone().requires_grad_(),
        old_logprobs_BT=old_BT,
        ref_logprobs_BT=None,
        engine_logprobs_BT=engine_BT,
        advantages_BT=torch.ones(1, 2),
        loss_mask_BT=torch.ones(1, 2),
        norm=LossNorm(tokens=2, sequences=1),
        cfg=AlgoConfig(tis_cap=2.0),
        beta=0.0,
    )
    assert loss.item() == pytest.approx((-2 - math.exp(-0.5)) / 2)
    assert metrics["tis/capped_frac"].item() == pytest.approx(0.5)
    assert metrics["tis/weight"].item() == pytest.approx((2 + math.exp(-0.5)) / 2)


def test_kl_in_the_reward_keeps_it_out_of_the_loss():
    logp_BT = torch.zeros(1, 1, requires_grad=True)
    common = dict(
        logprobs_BT=logp_BT,
        old_logprobs_BT=logp_BT.detach(),
        ref_logprobs_BT=torch.full((1, 1), -1.0),
        engine_logprobs_BT=logp_BT.detach(),
        advantages_BT=torch.ones(1, 1),
        loss_mask_BT=torch.ones(1, 1),
        norm=LossNorm(tokens=1, sequences=1),
        beta=0.5,
    )
    in_loss, metrics = micro_batch_loss(**common, cfg=AlgoConfig(beta=0.5))
    in_reward, reward_metrics = micro_batch_loss(**common, cfg=AlgoConfig(beta=0.5, kl_in="reward"))
    assert in_loss.item() == pytest.approx(-1 + 0.5 * (math.exp(-1) - 1 + 1))  # k3 of log r = -1
    assert in_reward.item() == pytest.approx(-1.0)
    assert "kl" in metrics and "kl" not in reward_metrics


def test_mask_truncated_drops_cut_off_completions_from_the_loss():
    def traj(finish: str) -> Trajectory:
        comp = Completion(token_ids=[5, 6], logprobs=[-1.0, -1.0], finish_reason=finish)
        return Trajectory(prompt_index=0, prompt_ids=[1, 2], turns=[Turn(comp)], weight_version=0)

    trajectories = [traj("stop"), traj("length")]
    kept = build_batch(trajectories, pad_id=0)
    masked = build_batch(trajectories, pad_id=0, mask_truncated=True)
    assert kept.loss_mask_BT.tolist() == [[0, 0, 1, 1], [0, 0, 1, 1]]
    assert masked.loss_mask_BT.tolist() == [[0, 0, 1, 1], [0, 0, 0, 0]]
    assert torch.equal(masked.input_ids_BT, kept.input_ids_BT)


# --- multi-turn: MT-GRPO and per-turn returns -------------------------------------

# one group of two episodes over 6 columns (column 0: prompt)
# sample 0: turn 0 at columns 1-2, observation at 3, turn 1 at 4-5
# sample 1: turn 0 at columns 1-3 (answered at once, one turn)
TURNS_BT = torch.tensor([[-1, 0, 0, -1, 1, 1], [-1, 0, 0, 0, -1, -1]])
TURN_MASK_BT = (TURNS_BT >= 0).float()


def _turn_inputs(scores, turn_rewards, credit, **extra):
    return AdvantageInputs(
        scores_B=torch.tensor(scores),
        mask_BT=TURN_MASK_BT,
        group_size=2,
        turn_index_BT=TURNS_BT,
        turn_rewards_BK=torch.tensor(turn_rewards),
        turn_counts_B=torch.tensor([2, 1]),
        credit_turns_B=torch.tensor(credit),
        **extra,
    )


def test_mt_grpo_adds_the_turn_advantage_on_credited_turns_by_hand():
    # outcome scores (1, 0) -> group-normalised (+1, -1); turn rewards of turn 0:
    # (1, 0) -> (+1, -1). Sample 0 searched in turn 0 (credit 1 turn): turn 0 gets
    # 1 + 0.5 * 1, turn 1 only the outcome 1. Sample 1's only turn: -1 + 0.5 * -1.
    out = ADVANTAGES["mt_grpo"](
        _turn_inputs([1.0, 0.0], [[1.0, 0.0], [0.0, 0.0]], [1, 1]),
        cfg=AlgoConfig(turn_advantage_coef=0.5, adv_eps=0.0),
    )
    expected = torch.tensor([[0, 1.5, 1.5, 0, 1, 1], [0, -1.5, -1.5, -1.5, 0, 0]])
    torch.testing.assert_close(out.advantages_BT, expected)


def test_mt_grpo_with_zero_coefficient_is_grpo_on_the_outcome():
    inputs = _turn_inputs([1.0, 0.0], [[1.0, 0.5], [0.0, 0.0]], [2, 1])
    mt = ADVANTAGES["mt_grpo"](inputs, cfg=AlgoConfig(turn_advantage_coef=0.0))
    plain = ADVANTAGES["grpo"](inputs, cfg=AlgoConfig())
    torch.testing.assert_close(mt.advantages_BT, plain.advantages_BT)


def test_turn_returns_by_hand():
    # gamma 0.5. Sample 0: turn rewards (0.2, 0), score 1:
    #   G_1 = 0 + 1 = 1, G_0 = 0.2 + 0.5 * 1 = 0.7
    # sample 1: one turn, reward 0.1, score 0: G_0 = 0.1
    # baseline: group mean of G_0 = 0.4 (no std scaling)
    out = ADVANTAGES["turn_returns"](
        _turn_inputs([1.0, 0.0], [[0.2, 0.0], [0.1, 0.0]], [1, 1]),
        cfg=AlgoConfig(gamma=0.5, scale_by_std=False),
    )
    expected = torch.tensor([[0, 0.3, 0.3, 0, 0.6, 0.6], [0, -0.3, -0.3, -0.3, 0, 0]])
    torch.testing.assert_close(out.advantages_BT, expected)


def test_turn_returns_without_turn_rewards_is_grpo():
    inputs = _turn_inputs([1.0, 0.0], [[0.0, 0.0], [0.0, 0.0]], [1, 1])
    turns = ADVANTAGES["turn_returns"](inputs, cfg=AlgoConfig())
    torch.testing.assert_close(
        turns.advantages_BT, ADVANTAGES["grpo"](inputs, cfg=AlgoConfig()).advantages_BT
    )


def test_multi_turn_estimators_need_turns():
    with pytest.raises(ValueError, match="turns"):
        ADVANTAGES["mt_grpo"](
            AdvantageInputs(scores_B=torch.ones(2), mask_BT=MASK_BT, group_size=2),
            cfg=AlgoConfig(),
        )


def test_the_kl_controller_moves_only_toward_a_target_and_restores_whole():
    from grouprl.algo.kl import KLController

    fixed = KLController(0.1)
    fixed.update(0.5, n_samples=128)
    assert fixed.beta == 0.1  # no algo.kl_target: algo.beta stays
    adaptive = KLController(0.1, target=0.1, horizon=10_000)
    adaptive.update(None, n_samples=128)  # nothing measured this step
    assert adaptive.beta == 0.1
    adaptive.update(0.15, n_samples=128)
    assert adaptive.beta == pytest.approx(
        adaptive_kl_coef(0.1, observed_kl=0.15, target=0.1, horizon=10_000, n_samples=128)
    )
    restored = KLController(0.1, target=0.1)
    restored.load_state_dict(adaptive.state_dict())
    assert restored.beta == adaptive.beta


def test_dynamic_sampling_keeps_groups_whose_rewards_differ_and_warmup_holds_the_policy():
    from grouprl.algo.shaping import policy_learns, signal_groups

    assert signal_groups([1.0, 1.0, 0.0, 1.0, 0.0, 0.0], group_size=2) == [False, True, False]
    assert [policy_learns(s, critic_warmup_steps=2) for s in (1, 2, 3)] == [False, False, True]
