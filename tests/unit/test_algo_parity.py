"""Where grouprl's update departs from TRL and verl, the switch for each, and the fixes an
external check against them found: GAE across tool replies, bounded log ratios, exact
zeros for all-equal groups, and settings the chosen estimator would ignore.

Suffixes: B samples, T tokens, P prompts, G samples per prompt.
"""

import math
import statistics

import pytest
import torch

from grouprl.algo.advantages import ADVANTAGES, AdvantageInputs
from grouprl.algo.aggregate import LossNorm
from grouprl.algo.kl import K3_MAX, k3
from grouprl.algo.losses import LOG_RATIO_BOUND, SEQUENCE_LOG_RATIO_MAX, gspo, ppo_clip
from grouprl.algo.objective import micro_batch_loss
from grouprl.config import ConfigError, check_config, load_config
from grouprl.config.algo_section import AlgoConfig

# --- GAE over a multi-turn row ------------------------------------------------------
# prompt | turn 1: a1 a2 | tool reply: 3 tokens | turn 2: b1 b2   (score at b2)
TWO_TURNS_BT = torch.tensor([[0.0, 1, 1, 0, 0, 0, 1, 1]])
TURN_1 = [1, 2]  # columns of a1, a2
GENERATED = [1, 2, 6, 7]  # a1 a2 b1 b2
VALUES_BT = torch.tensor([[7.0, 0.5, 0.2, 7, 7, 7, 0.3, 0.6]])  # 7s: off the mask, unread


def _gae(score: float, *, gamma: float, lam: float):
    inputs = AdvantageInputs(
        scores_B=torch.tensor([score]), mask_BT=TWO_TURNS_BT, group_size=1, values_BT=VALUES_BT
    )
    cfg = AlgoConfig(advantage="gae", gamma=gamma, gae_lambda=lam, adv_eps=0.0)
    return ADVANTAGES["gae"](inputs, cfg=cfg)


def _population_whiten(values: list[float]) -> list[float]:
    mean, std = statistics.fmean(values), statistics.pstdev(values)
    return [(v - mean) / std for v in values]


def test_gae_carries_the_final_score_across_the_tool_reply():
    # gamma = lambda = 1: every generated token's return is the score; A_t = 1 - V_t.
    # (Resetting at the masked reply gave turn 1 returns of 0, not 1.)
    out = _gae(1.0, gamma=1.0, lam=1.0)
    torch.testing.assert_close(out.returns_BT, torch.tensor([[0.0, 1, 1, 0, 0, 0, 1, 1]]))
    raw = [0.5, 0.8, 0.7, 0.4]
    got = out.advantages_BT[0, GENERATED].tolist()
    assert got == pytest.approx(_population_whiten(raw), abs=1e-6)
    assert torch.all(out.advantages_BT[0, [0, 3, 4, 5]] == 0)


def test_gae_discounts_over_generated_tokens_only_by_hand():
    # gamma = lambda = 0.5; the reply is skipped, so a2's next value is b1's (0.3):
    # b2: delta = 1 - 0.6 = 0.4                 A = 0.4                        R = 1.0
    # b1: delta = 0.5 * 0.6 - 0.3 = 0           A = 0 + 0.25 * 0.4 = 0.1       R = 0.4
    # a2: delta = 0.5 * 0.3 - 0.2 = -0.05       A = -0.05 + 0.25 * 0.1 = -0.025  R = 0.175
    # a1: delta = 0.5 * 0.2 - 0.5 = -0.4        A = -0.4 + 0.25 * -0.025 = -0.40625
    #                                                                          R = 0.09375
    out = _gae(1.0, gamma=0.5, lam=0.5)
    returns = out.returns_BT[0, GENERATED].tolist()
    assert returns == pytest.approx([0.09375, 0.175, 0.4, 1.0], abs=1e-6)
    raw = [-0.40625, -0.025, 0.1, 0.4]
    got = out.advantages_BT[0, GENERATED].tolist()
    assert got == pytest.approx(_population_whiten(raw), abs=1e-6)
    # the final score reaches turn 1: one more point of score adds (gamma * lambda)^k
    # to the return k generated tokens before the last: 0.25^3 at a1, 0.25^2 at a2
    lost = _gae(0.0, gamma=0.5, lam=0.5).returns_BT
    gained = (out.returns_BT - lost)[0, TURN_1].tolist()
    assert gained == pytest.approx([0.015625, 0.0625], abs=1e-6)


def test_ppo_with_a_critic_on_the_multi_turn_recipe_is_accepted():
    check_config(
        load_config("tiny-search-mtgrpo", ["algo.name=ppo", "critic.path=builtin:tiny-search"])
    )


# --- bounded log ratios ----------------------------------------------------------------


def test_a_far_off_token_gives_a_bounded_ppo_gradient():
    # token 0: log ratio 25 (ratio 7e10) with a negative advantage and no dual clip: the
    # unbounded loss's gradient would be -A * ratio = 7e10. Token 1: an ordinary ratio.
    old = torch.tensor([[-30.0, -1.0]])
    logp = torch.tensor([[-5.0, -0.9]], requires_grad=True)
    out = ppo_clip(
        logprobs_BT=logp,
        old_logprobs_BT=old,
        advantages_BT=torch.tensor([[-1.0, -1.0]]),
        loss_mask_BT=torch.ones(1, 2),
        cfg=AlgoConfig(),
    )
    out.loss_BT.sum().backward()
    assert out.loss_BT[0, 0].item() == pytest.approx(math.exp(LOG_RATIO_BOUND), rel=1e-5)
    assert torch.isfinite(logp.grad).all()
    assert abs(logp.grad[0, 0].item()) <= 1.0  # clamped: passes no gradient
    assert logp.grad[0, 1].item() == pytest.approx(math.exp(0.1), rel=1e-5)  # untouched


def test_a_far_off_sequence_gives_a_bounded_gspo_gradient():
    logp = torch.tensor([[-5.0, -5.0]], requires_grad=True)
    out = gspo(
        logprobs_BT=logp,
        old_logprobs_BT=torch.tensor([[-30.0, -30.0]]),
        advantages_BT=torch.tensor([[-1.0, -1.0]]),
        loss_mask_BT=torch.ones(1, 2),
        cfg=AlgoConfig(clip_eps_low=3e-4, clip_eps_high=4e-4),
    )
    out.loss_BT[0, 0].backward()
    assert out.loss_BT[0, 0].item() == pytest.approx(math.exp(SEQUENCE_LOG_RATIO_MAX), rel=1e-5)
    assert torch.isfinite(logp.grad).all() and logp.grad.abs().max().item() <= 1.0


@pytest.mark.parametrize("gap", [25.0, -25.0])  # reference far above / far below the policy
def test_k3_is_bounded(gap):
    logp = torch.tensor([-30.0 + max(-gap, 0.0)], requires_grad=True)
    ref = logp.detach() + gap
    kl = k3(logp, ref)
    kl.sum().backward()
    assert kl.item() == K3_MAX  # e^25 - 26 and 24 + e^-25 unbounded
    assert torch.isfinite(logp.grad).all() and logp.grad.abs().max().item() <= 1.0


# --- exact zeros for groups whose rewards are all equal ---------------------------------


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo", "reinforce_pp_baseline"])
@pytest.mark.parametrize("std", ["population", "sample"])
def test_all_equal_rewards_give_exactly_zero(name, std):
    rewards_B = torch.full((16,), 0.3)
    inputs = AdvantageInputs(scores_B=rewards_B, mask_BT=torch.ones(16, 1), group_size=16)
    adv = ADVANTAGES[name](inputs, cfg=AlgoConfig(adv_std=std)).advantages_BT
    assert torch.equal(adv, torch.zeros_like(adv))


@pytest.mark.parametrize("name", ["reinforce_pp", "gae"])
@pytest.mark.parametrize("std", ["population", "sample"])
def test_batch_whitening_of_equal_returns_gives_exactly_zero(name, std):
    # REINFORCE++ whitens over the batch's tokens: one return of 0.3 on 37 tokens of 7
    # samples (float32's token mean of 0.3 is not 0.3 here: about 0.029 before the fix)
    mask_BT = (torch.arange(6)[None, :] < torch.tensor([6, 6, 6, 6, 6, 6, 1])[:, None]).float()
    inputs = AdvantageInputs(
        scores_B=torch.full((7,), 0.3),
        mask_BT=mask_BT,
        group_size=1,
        values_BT=torch.zeros(7, 6),  # gae: A_t = 0.3 everywhere (gamma = lambda = 1)
    )
    adv = ADVANTAGES[name](inputs, cfg=AlgoConfig(adv_std=std)).advantages_BT
    assert torch.equal(adv, torch.zeros_like(adv))


def test_batch_whitening_of_unequal_returns_is_the_formula_bit_for_bit():
    # the exact-zero rule changes nothing else: the textbook formula, the same floats
    scores_B = torch.tensor([0.3, 0.3, 0.3, 0.7, 0.3, 0.1, 0.3])
    mask_BT = (torch.arange(6)[None, :] < torch.tensor([5, 3, 6, 1, 4, 6, 2])[:, None]).float()
    inputs = AdvantageInputs(scores_B=scores_B, mask_BT=mask_BT, group_size=1)
    for std in ("population", "sample"):
        cfg = AlgoConfig(advantage="reinforce_pp", adv_std=std)
        got = ADVANTAGES["reinforce_pp"](inputs, cfg=cfg).advantages_BT
        x_BT, count = scores_B[:, None] * mask_BT, mask_BT.sum()
        mean = x_BT.sum() / count
        squares = (((x_BT - mean) * mask_BT) ** 2).sum()
        var = squares / (count - 1) if std == "sample" else squares / count
        assert torch.equal(got, (x_BT - mean) / (var.sqrt() + cfg.adv_eps) * mask_BT), std


def test_the_naive_formula_is_not_zero_for_equal_rewards():
    # what the test above guards against: float32's mean of 0.3 x 16 is not 0.3
    r = torch.full((16,), 0.3)
    naive = (r - r.mean()) / (r.std(unbiased=False) + 1e-6)
    assert naive.abs().max().item() > 1e-3


# --- switches for a TRL or verl user ------------------------------------------------------


def _grpo(rewards: list[float], **keys) -> list[float]:
    r = torch.tensor(rewards)
    inputs = AdvantageInputs(scores_B=r, mask_BT=torch.ones(len(r), 1), group_size=len(r))
    return ADVANTAGES["grpo"](inputs, cfg=AlgoConfig(**keys)).advantages_BT.flatten().tolist()


def test_group_std_switch_by_hand():
    # one success in four: mean 1/4; population std sqrt(3)/4, sample std 1/2
    population = _grpo([1.0, 0, 0, 0], adv_eps=0.0)
    assert population == pytest.approx([math.sqrt(3)] + [-1 / math.sqrt(3)] * 3)
    sample = _grpo([1.0, 0, 0, 0], adv_eps=0.0, adv_std="sample")
    assert sample == pytest.approx([1.5, -0.5, -0.5, -0.5])
    trl = _grpo([1.0, 0, 0, 0], adv_eps=1e-4, adv_std="sample")  # TRL's: 0.75 / (0.5 + 1e-4)
    assert trl[0] == pytest.approx(0.75 / 0.5001, rel=1e-6)


def test_whitening_std_switch_by_hand():
    # reinforce_pp over two one-token samples, scores 1 and 0: mean 0.5,
    # population std 0.5 -> +-1; sample std sqrt(0.5) -> +-sqrt(2)/2
    inputs = AdvantageInputs(
        scores_B=torch.tensor([1.0, 0.0]), mask_BT=torch.ones(2, 1), group_size=1
    )
    for std, expected in (("population", 1.0), ("sample", math.sqrt(0.5))):
        cfg = AlgoConfig(advantage="reinforce_pp", adv_eps=0.0, adv_std=std)
        got = ADVANTAGES["reinforce_pp"](inputs, cfg=cfg).advantages_BT.flatten().tolist()
        assert got == pytest.approx([expected, -expected])


@pytest.mark.parametrize(
    ("correct", "loss", "grad"),
    [
        # k3 = ref/p - 1 - log(ref/p) with ref/p = 1/2: 0.5 - 1 + log 2;  dk3/dlogp = 1 - 1/2
        (False, 0.1 * (math.log(2) - 0.5), 0.1 * 0.5),
        # times the ratio r = p / p_old = 2:  d(k3 r)/dlogp = 0.5 * 2 + k3 * 2
        (True, 0.1 * 2 * (math.log(2) - 0.5), 0.1 * (1 + 2 * (math.log(2) - 0.5))),
    ],
)
def test_kl_bias_correction_multiplies_k3_by_the_ratio(correct, loss, grad):
    logp = torch.tensor([[math.log(0.5)]], requires_grad=True)
    cfg = AlgoConfig(beta=0.1, kl_bias_correction=correct)
    total, metrics = micro_batch_loss(
        logprobs_BT=logp,
        old_logprobs_BT=torch.tensor([[math.log(0.25)]]),
        ref_logprobs_BT=torch.tensor([[math.log(0.25)]]),
        engine_logprobs_BT=torch.tensor([[math.log(0.25)]]),
        advantages_BT=torch.zeros(1, 1),  # no policy-gradient term: the KL alone
        loss_mask_BT=torch.ones(1, 1),
        norm=LossNorm(tokens=1, sequences=1),
        cfg=cfg,
        beta=cfg.beta,
    )
    total.backward()
    assert total.item() == pytest.approx(loss, rel=1e-5)
    assert logp.grad.item() == pytest.approx(grad, rel=1e-5)
    assert metrics["kl"].item() == pytest.approx(math.log(2) - 0.5, rel=1e-5)


# --- settings the chosen estimator would ignore ----------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["algo.name=reinforce_pp", "algo.gamma=0.9"],
            r"algo\.gamma=0\.9 would be ignored: algo\.advantage=reinforce_pp does not read it "
            r"\(it reads algo\.adv_eps, algo\.adv_std\)\. Set algo\.gamma=1\.0 \(its default\) "
            r"or an estimator that reads it: algo\.advantage=gae or turn_returns",
        ),
        (
            ["algo.name=dr_grpo", "algo.adv_eps=0.0001"],
            r"algo\.adv_eps=0\.0001 would be ignored: algo\.advantage=dr_grpo does not read it",
        ),
        (
            ["algo.scale_by_std=false", "algo.adv_std=sample"],
            r"algo\.adv_std='sample' would be ignored: algo\.advantage=grpo divides by no std "
            r"\(algo\.scale_by_std=false\)\. Set algo\.adv_std='population'",
        ),
        (
            ["algo.gae_lambda=0.95"],
            r"algo\.gae_lambda=0\.95 would be ignored.*algo\.advantage=gae\.",
        ),
        (
            ["algo.kl_bias_correction=true"],
            r"algo\.kl_bias_correction=true would be ignored: it is read only with a KL term in "
            r"the loss \(here algo\.beta=0\.0, algo\.kl_in=loss\)\. .*algo\.beta > 0",
        ),
        (["algo.kl_horizon=100"], r"algo\.kl_horizon=100 would be ignored.*algo\.kl_target"),
    ],
)
def test_a_setting_the_run_would_ignore_is_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        check_config(load_config("tiny-arith", overrides))


@pytest.mark.parametrize(
    "overrides",
    [
        # TRL 1.16's GRPO: sample std, eps 1e-4, KL with the bias correction
        [
            "algo.adv_std=sample",
            "algo.adv_eps=0.0001",
            "algo.beta=0.01",
            "algo.kl_bias_correction=true",
        ],
        [
            "algo.name=ppo",
            "critic.path=builtin:tiny-arith",
            "algo.gamma=0.99",
            "algo.adv_std=sample",
        ],
        ["algo.name=dr_grpo", "algo.scale_by_std=true"],  # the default value is never refused
    ],
)
def test_settings_the_run_reads_are_accepted(overrides):
    check_config(load_config("tiny-arith", overrides))
