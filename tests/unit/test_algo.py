"""Algorithm math against values worked out by hand from the formulas."""

import math

import pytest
import torch

from grouprl.algo.advantages import ADVANTAGES, AdvantageInputs, group_normalized
from grouprl.algo.aggregate import LossNorm, token_mean
from grouprl.algo.kl import KL_ESTIMATORS
from grouprl.algo.losses import ppo_clip
from grouprl.algo.objective import micro_batch_loss
from grouprl.algo.registry import Registry
from grouprl.config.algo_section import AlgoConfig


def test_grpo_advantage_uses_population_std():
    # one success in four: mean 1/4, population std sqrt(3)/4
    adv = group_normalized(torch.tensor([[1.0, 0.0, 0.0, 0.0]]), scale_by_std=True, eps=0.0)
    expected = torch.tensor(
        [[math.sqrt(3), -1 / math.sqrt(3), -1 / math.sqrt(3), -1 / math.sqrt(3)]]
    )
    torch.testing.assert_close(adv, expected)
    # the sample std (divide by G - 1) would give 1.5 for the success instead
    assert not math.isclose(float(adv[0, 0]), 1.5)


def test_grpo_advantage_without_std_and_constant_groups():
    rewards = torch.tensor([[2.0, 0.0, 1.0], [0.5, 0.5, 0.5]])
    centered = group_normalized(rewards, scale_by_std=False, eps=1e-6)
    torch.testing.assert_close(centered, torch.tensor([[1.0, -1.0, 0.0], [0.0, 0.0, 0.0]]))
    inputs = AdvantageInputs(scores_B=rewards.flatten(), mask_BT=torch.ones(6, 1), group_size=3)
    scaled = ADVANTAGES["grpo"](inputs, cfg=AlgoConfig()).advantages_BT.view(2, 3)
    assert torch.equal(scaled[1], torch.zeros(3))  # no signal from an all-equal group


@pytest.mark.parametrize(
    ("ratio", "adv", "loss", "clipped"),
    [
        (1.5, 1.0, -1.2, True),  # gain capped at 1 + eps
        (1.5, -1.0, 1.5, False),  # pessimistic side keeps the unclipped term
        (0.5, 1.0, -0.5, False),
        (0.5, -1.0, 0.8, True),  # capped at 1 - eps
        (1.0, 2.0, -2.0, False),
    ],
)
def test_ppo_clip_token_values(ratio, adv, loss, clipped):
    old = torch.tensor([[math.log(0.4)]])
    new = old + math.log(ratio)
    out = ppo_clip(
        logprobs_BT=new,
        old_logprobs_BT=old,
        advantages_BT=torch.tensor([[adv]]),
        loss_mask_BT=torch.ones(1, 1),
        cfg=AlgoConfig(clip_eps_low=0.2, clip_eps_high=0.2),
    )
    assert out.loss_BT.item() == pytest.approx(loss, abs=1e-6)
    assert bool(out.clipped_BT.item()) is clipped


def test_ppo_clip_higher_uses_separate_upper_range():
    old = torch.zeros(1, 1)
    out = ppo_clip(
        logprobs_BT=old + math.log(1.5),
        old_logprobs_BT=old,
        advantages_BT=torch.ones(1, 1),
        loss_mask_BT=torch.ones(1, 1),
        cfg=AlgoConfig(clip_eps_low=0.2, clip_eps_high=0.28),
    )
    assert out.loss_BT.item() == pytest.approx(-1.28)


def test_kl_estimators_by_hand():
    logp, ref = torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)])
    assert KL_ESTIMATORS["k1"](logp, ref).item() == pytest.approx(math.log(2))
    assert KL_ESTIMATORS["k2"](logp, ref).item() == pytest.approx(0.5 * math.log(2) ** 2)
    assert KL_ESTIMATORS["k3"](logp, ref).item() == pytest.approx(0.5 - 1 + math.log(2))
    same = torch.tensor([-1.3])
    assert KL_ESTIMATORS["k3"](same, same).item() == 0.0


def test_token_mean_uses_the_global_denominator():
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0]])
    assert token_mean(values, mask, norm=LossNorm(tokens=4, sequences=2)).item() == 3.5
    assert token_mean(values, mask, norm=LossNorm(tokens=8, sequences=4)).item() == 1.75


def test_objective_adds_beta_times_k3():
    logp = torch.tensor([[math.log(0.5), 0.0]])
    ref = torch.tensor([[math.log(0.25), 0.0]])
    mask = torch.tensor([[1.0, 0.0]])
    cfg = AlgoConfig(beta=0.1, kl_estimator="k3")
    loss, metrics = micro_batch_loss(
        logprobs_BT=logp,
        old_logprobs_BT=logp,
        ref_logprobs_BT=ref,
        engine_logprobs_BT=logp,
        advantages_BT=torch.tensor([[2.0, 0.0]]),
        loss_mask_BT=mask,
        norm=LossNorm(tokens=1, sequences=1),
        cfg=cfg,
        beta=cfg.beta,
    )
    k3 = 0.5 - 1 + math.log(2)
    assert loss.item() == pytest.approx(-2.0 + 0.1 * k3)
    assert metrics["kl"].item() == pytest.approx(k3)
    assert metrics["clip_frac"].item() == 0.0


def test_registry_refuses_duplicates():
    reg = Registry("thing")
    reg.register("a")(lambda: 1)
    with pytest.raises(KeyError, match="registered twice"):
        reg.register("a")(lambda: 2)


def test_config_choices_match_registries():
    from typing import get_args

    from grouprl.algo.aggregate import AGGREGATIONS
    from grouprl.algo.losses import POLICY_LOSSES

    fields = AlgoConfig.model_fields
    assert set(get_args(fields["advantage"].annotation)) == set(ADVANTAGES)
    assert set(get_args(fields["policy_loss"].annotation)) == set(POLICY_LOSSES)
    assert set(get_args(fields["kl_estimator"].annotation)) == set(KL_ESTIMATORS)
    assert set(get_args(fields["loss_agg"].annotation)) == set(AGGREGATIONS)


def test_the_traits_table_and_the_estimator_registry_name_the_same_estimators():
    from grouprl.algo.traits import ESTIMATORS

    assert set(ADVANTAGES) == set(ESTIMATORS)
    for name in ESTIMATORS:  # the schema takes its choices from the table
        assert AlgoConfig(advantage=name).advantage == name


def test_estimators_give_one_advantage_per_sample_unless_their_traits_say_per_token():
    """The table's ``per_token`` and ``token_returns`` describe what the functions do."""
    from grouprl.algo.traits import ESTIMATORS

    torch.manual_seed(0)
    scores_B, mask_BT = torch.randn(4), torch.ones(4, 5)
    token_rewards_BT = torch.randn(4, 5) * 0.1
    for name, traits in ESTIMATORS.items():
        if traits.per_token or traits.needs_values or traits.needs_turns:
            continue
        cfg = AlgoConfig(advantage=name)
        for rewards in (None, token_rewards_BT):
            inputs = AdvantageInputs(
                scores_B=scores_B, mask_BT=mask_BT, group_size=2, token_rewards_BT=rewards
            )
            adv_BT = ADVANTAGES[name](inputs, cfg=cfg).advantages_BT
            varies = bool((adv_BT - adv_BT[:, :1]).abs().max() > 1e-6)
            assert varies == (rewards is not None and traits.token_returns), name
