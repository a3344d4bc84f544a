"""Entropy control (algo/entropy.py, the Clip-Cov and KL-Cov losses, the bonus in the
objective), each against figures worked out by hand."""

import math
from dataclasses import asdict

import pytest
import torch

from grouprl.algo.aggregate import LossNorm
from grouprl.algo.entropy import (
    EntropyController,
    ExplorationWatch,
    fit_ceiling,
    high_entropy_mask,
)
from grouprl.algo.kl import KLController
from grouprl.algo.losses import POLICY_LOSSES
from grouprl.algo.objective import micro_batch_loss
from grouprl.ckpt.state import TrainerState
from grouprl.config.algo_section import AlgoConfig
from grouprl.config.checks import check_config
from grouprl.config.errors import ConfigError
from grouprl.config.loader import load_config
from grouprl.data.sampler import PromptSampler
from grouprl.driver.components import RunState

pytestmark = pytest.mark.unit

T = torch.tensor


def test_the_high_entropy_mask_keeps_the_top_share_of_the_masked_tokens():
    entropy_BT = T([[0.1, 0.5, 0.9, 0.3], [0.7, 0.2, 5.0, 5.0]])
    mask_BT = T([[1, 1, 1, 1], [1, 1, 0, 0]])  # the 5.0s are off the mask
    # 6 tokens, keep ceil(0.5 * 6) = 3 of highest entropy: 0.9, 0.7, 0.5
    assert high_entropy_mask(entropy_BT, mask_BT, keep=0.5).tolist() == [
        [False, True, True, False],
        [True, False, False, False],
    ]
    assert high_entropy_mask(entropy_BT, mask_BT, keep=1.0).tolist() == mask_BT.bool().tolist()
    # ceil(0.34 * 3) = 2 kept: the threshold is 0.5, and both tokens at it stay
    ties = high_entropy_mask(T([[0.5, 0.5, 0.1]]), T([[1, 1, 1]]), keep=0.34)
    assert ties.tolist() == [[True, True, False]]
    # 0.7 * 10 is 7.000000000000001 in floating point: still 7 kept
    assert int(high_entropy_mask(torch.arange(10.0)[None], torch.ones(1, 10), keep=0.7).sum()) == 7
    # one token at least, however small the share
    assert high_entropy_mask(T([[0.2, 0.4]]), T([[1, 1]]), keep=0.01).tolist() == [[False, True]]


def test_the_adaptive_coefficient_moves_toward_the_target_and_acts_only_below_it():
    c = EntropyController(0.0, target=0.2, delta=0.005)
    assert c.coef == 0.0
    c.update(0.1)  # below: alpha 0.005, the bonus on
    assert (c.alpha, c.coef) == (0.005, 0.005)
    c.update(0.15)
    assert c.alpha == pytest.approx(0.01)
    c.update(0.3)  # above: alpha 0.005, the bonus off
    assert (c.alpha, c.coef) == (pytest.approx(0.005), 0.0)
    c.update(0.3)
    c.update(0.3)  # never below 0
    assert c.alpha == 0.0
    again = EntropyController(1.0, target=0.2)
    again.load_state_dict(c.state_dict())
    assert (again.alpha, again.below) == (0.0, False)
    fixed = EntropyController(0.01)  # no target: the coefficient stays
    fixed.update(5.0)
    assert fixed.coef == 0.01


def test_the_ceiling_fit_recovers_a_and_b():
    hs = [0.1 * k for k in range(1, 11)]
    a, b = fit_ceiling(hs, [-2.0 * math.exp(h) + 3.0 for h in hs])
    assert (a, b) == (pytest.approx(2.0), pytest.approx(3.0))
    assert fit_ceiling([0.5, 0.5, 0.5], [0.1, 0.2, 0.3]) is None  # nothing to fit


def test_the_watch_warns_once_when_the_reward_nears_the_fitted_ceiling():
    # R = -2 e^H + 3: the ceiling is b - a = 1; the first step (H = 1) has R = 3 - 2e;
    # 90% of the way: R >= 0.9 + 0.1 (3 - 2e) = 0.656, so H <= ln(1.172) = 0.159
    def run(entropies):
        watch, seen = ExplorationWatch(), []
        for h in entropies:
            seen.append(watch.add(h, -2.0 * math.exp(h) + 3.0))
        return seen

    far = run([1.0 - 0.07 * k for k in range(10)])  # down to H = 0.37: R = 0.30
    assert far[-1][0] == pytest.approx(1.0)
    assert [warning for _, warning in far] == [None] * 10
    near = run([1.0 - 0.1 * k for k in range(12)])  # H = 0.1 at the 10th step
    assert [ceiling for ceiling, _ in near[:9]] == [None] * 9  # fewer than 10 points
    warnings = [k for k, (_, warning) in enumerate(near) if warning is not None]
    assert warnings == [9]  # once
    assert "ceiling" in near[9][1] and "1.000" in near[9][1]
    assert ExplorationWatch().add(None, 0.5) == (None, None)


def _cfg(**keys):
    return AlgoConfig(**keys)


def test_clip_cov_holds_back_a_token_of_the_covariance_band():
    # ratio 1 everywhere (no clip); A mean 0, logp mean -1.75:
    # cov = [3 * 0.75, -1 * -0.25, 0.25, 0.25] = [2.25, 0.25, 0.25, 0.25]: only token 0 is
    # in (1, 5), and k = max(int(2e-4 * 4), 1) = 1
    logp = T([[-1.0, -2.0, -2.0, -2.0]])
    out = POLICY_LOSSES["clip_cov"](
        logprobs_BT=logp,
        old_logprobs_BT=logp.clone(),
        advantages_BT=T([[3.0, -1.0, -1.0, -1.0]]),
        loss_mask_BT=T([[1, 1, 1, 1]]),
        cfg=_cfg(policy_loss="clip_cov"),
    )
    assert out.loss_BT.tolist() == [[0.0, 1.0, 1.0, 1.0]]
    assert out.clipped_BT.tolist() == [[True, False, False, False]]
    # a band nobody is in holds back nothing
    none = POLICY_LOSSES["clip_cov"](
        logprobs_BT=logp,
        old_logprobs_BT=logp.clone(),
        advantages_BT=T([[3.0, -1.0, -1.0, -1.0]]),
        loss_mask_BT=T([[1, 1, 1, 1]]),
        cfg=_cfg(policy_loss="clip_cov", clip_cov_bounds=(3.0, 5.0)),
    )
    assert none.loss_BT.tolist() == [[-3.0, 1.0, 1.0, 1.0]]


def test_kl_cov_penalises_the_token_of_largest_covariance_without_a_clip():
    logp = T([[-1.0, -2.0, -2.0, -2.0]])
    old = T([[-1.1, -2.0, -2.0, -2.5]])  # ratios e^0.1, 1, 1, e^0.5 (no clip at 0.2)
    out = POLICY_LOSSES["kl_cov"](
        logprobs_BT=logp,
        old_logprobs_BT=old,
        advantages_BT=T([[3.0, -1.0, -1.0, -1.0]]),
        loss_mask_BT=T([[1, 1, 1, 1]]),
        cfg=_cfg(policy_loss="kl_cov", kl_cov_coef=2.0),
    )
    # token 0 (cov 2.25, the largest): -e^0.1 * 3 + 2 * 0.1; the others -ratio * A
    want = [[-3 * math.exp(0.1) + 0.2, 1.0, 1.0, math.exp(0.5)]]
    torch.testing.assert_close(out.loss_BT, T(want))
    assert not out.clipped_BT.any()


def test_the_objective_trains_only_the_high_entropy_tokens_and_adds_the_bonus():
    entropy_BT = T([[0.1, 0.9, 0.5, 0.7]])
    logp = T([[-1.0, -1.0, -1.0, -1.0]])
    common = dict(
        logprobs_BT=logp,
        old_logprobs_BT=logp.clone(),
        ref_logprobs_BT=None,
        engine_logprobs_BT=logp.clone(),
        advantages_BT=T([[1.0, 2.0, 3.0, 4.0]]),
        loss_mask_BT=T([[1, 1, 1, 1]]),
        norm=LossNorm(tokens=4, sequences=1),
        beta=0.0,
        entropy_BT=entropy_BT,
    )
    every, _ = micro_batch_loss(**common, cfg=_cfg())
    assert float(every) == pytest.approx(-(1 + 2 + 3 + 4) / 4)
    # keep 0.5: the tokens of entropy 0.9 and 0.7 (A = 2 and 4); the mean is still over 4
    high, _ = micro_batch_loss(**common, cfg=_cfg(top_entropy_quantile=0.5))
    assert float(high) == pytest.approx(-(2 + 4) / 4)
    # the bonus: - 0.1 * mean entropy = - 0.1 * 2.2 / 4
    bonus, _ = micro_batch_loss(**common, cfg=_cfg(), entropy_coef=0.1)
    assert float(bonus) == pytest.approx(-10 / 4 - 0.1 * 2.2 / 4)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["algo.cov_ratio=0.002"], r"algo\.cov_ratio=0\.002 would be ignored: algo\.policy_loss"),
        (["algo.kl_cov_coef=2", "algo.policy_loss=clip_cov"], r"only kl_cov do"),
        (["algo.entropy_coef_delta=0.01"], r"algo\.entropy_target turns on"),
    ],
)
def test_entropy_keys_that_would_be_ignored_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        check_config(load_config("tiny-arith", overrides))


def test_entropy_keys_load_and_verl_and_trl_keys_name_them():
    cfg = load_config(
        "tiny-arith",
        ["algo.policy_loss=clip_cov", "algo.dual_clip_c=3", "algo.entropy_target=0.2"],
    )
    check_config(cfg)
    assert (cfg.algo.policy_loss, cfg.algo.dual_clip_c) == ("clip_cov", 3.0)
    with pytest.raises(ConfigError, match=r"algo\.entropy_coef"):
        load_config("tiny-arith", ["actor_rollout_ref.actor.entropy_coeff=0.01"])
    with pytest.raises(ConfigError, match=r"algo\.top_entropy_quantile"):
        load_config("tiny-arith", ["top_entropy_quantile=0.2"])


def test_a_checkpoint_carries_the_entropy_coefficient_and_the_watch(tmp_path):
    def state():
        return RunState(
            sampler=PromptSampler(8, seed=0),
            kl=KLController(0.0),
            entropy=EntropyController(0.0, target=0.2),
        )

    ran = state()
    ran.entropy.update(0.1)
    ran.exploration.add(0.5, 0.25)
    saved = TrainerState(**ran.state_dict(), scheduler={}, rng={}, eval_before={})
    saved.write(tmp_path / "trainer_state.json")
    resumed = state()
    resumed.load_state_dict(asdict(TrainerState.read(tmp_path / "trainer_state.json")))
    assert (resumed.entropy.alpha, resumed.entropy.below) == (0.005, True)
    assert (resumed.exploration.entropies, resumed.exploration.rewards) == ([0.5], [0.25])
