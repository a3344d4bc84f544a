"""Off-policy corrections (algo/corrections.py) and the per-staleness statistics
(workers/update.py) on hand-computed examples.

The example batch: 2 sequences x 3 tokens, the last token of row 1 is padding (its
ratio e^30 must never matter). Ratios r = pi_prox / pi_behav:

    row 0:  1     3     0.25        product 0.75
    row 1:  1.5   0.8   (padding)   product 1.2
"""

import copy
import math
from typing import get_args

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from grouprl.algo.aggregate import LossNorm, token_mean
from grouprl.algo.correction_choice import CORRECTION_NAMES
from grouprl.algo.corrections import (
    CORRECTIONS,
    CorrectionInputs,
    correction_name,
    m2po_cutoff,
    mismatch_alarms,
)
from grouprl.algo.objective import micro_batch_loss
from grouprl.config.algo_section import AlgoConfig
from grouprl.config.loader import load_config
from grouprl.config.train import TrainConfig
from grouprl.types import TrainingBatch
from grouprl.workers.logprobs import TokenScorer
from grouprl.workers.update import offpolicy_parts, offpolicy_stats, policy_update

RATIOS_BT = torch.tensor([[1.0, 3.0, 0.25], [1.5, 0.8, math.exp(30.0)]])
MASK_BT = torch.tensor([[1, 1, 1], [1, 1, 0]])
BEHAV_BT = torch.full((2, 3), -2.0)
PROX_BT = BEHAV_BT + RATIOS_BT.log()


def _weights(correction: str, **algo) -> tuple[torch.Tensor, torch.Tensor]:
    """(w on the loss tokens, masked on the loss tokens) in row order."""
    cfg = AlgoConfig(correction=correction, **algo)
    out = CORRECTIONS[correction](CorrectionInputs(PROX_BT, BEHAV_BT, MASK_BT), cfg=cfg)
    assert not out.weight_BT.requires_grad
    keep = MASK_BT.bool()
    return out.weight_BT[keep], out.masked_BT[keep]


# the 5 loss tokens in order: r = 1, 3, 0.25, 1.5, 0.8
CASES = [
    ("none", {}, [1, 1, 1, 1, 1], []),
    ("tis", {}, [1, 2, 0.25, 1.5, 0.8], []),  # cap 2
    ("tis", {"tis_cap": 1.2}, [1, 1.2, 0.25, 1.2, 0.8], []),
    ("decoupled", {}, [1, 3, 0.25, 1.5, 0.8], []),  # cap 5: nothing above it
    ("decoupled", {"tis_cap": 2.0}, [1, 0, 0.25, 1.5, 0.8], [1]),  # 3 > 2: masked
    ("seq_tis", {}, [0.75, 0.75, 0.75, 1.2, 1.2], []),  # products, under the cap 2
    ("seq_tis", {"tis_cap": 1.0}, [0.75, 0.75, 0.75, 1.0, 1.0], []),
    ("token_mask", {}, [1, 0, 0, 1.5, 0.8], [1, 2]),  # band [0.5, 2]: 3 and 0.25 leave it
    ("seq_mask", {}, [0.75, 0.75, 0.75, 1.2, 1.2], []),  # both products inside [0.5, 2]
    ("seq_mask", {"is_band": (0.8, 2.0)}, [0, 0, 0, 1.2, 1.2], [0, 1, 2]),  # 0.75 < 0.8
    # (log r)^2 = 0, 1.2069, 1.9218, 0.1644, 0.0498. Largest first, the means of what is
    # left: 0.6686, 0.3553, 0.0714, 0.0249, 0: under 0.04 after dropping three
    ("m2po", {}, [1, 0, 0, 0, 1], [1, 2, 3]),
    ("m2po", {"m2po_threshold": 0.1}, [1, 0, 0, 1, 1], [1, 2]),  # 0.0714 < 0.1: drop two
]


@pytest.mark.parametrize(("correction", "algo", "weights", "masked"), CASES)
def test_each_correction_on_the_hand_computed_batch(correction, algo, weights, masked):
    weight, dropped = _weights(correction, **algo)
    torch.testing.assert_close(weight, torch.tensor(weights, dtype=torch.float32))
    assert torch.nonzero(dropped).flatten().tolist() == masked


def test_every_correction_has_a_hand_computed_case_and_a_config_choice():
    assert {case[0] for case in CASES} == set(CORRECTIONS)
    choices = set(get_args(AlgoConfig.model_fields["correction"].annotation))
    assert choices - {"auto"} == set(CORRECTIONS)
    assert tuple(CORRECTIONS) == CORRECTION_NAMES  # the config's torch-free list, in order


def _loss(cfg: AlgoConfig, *, old_BT=PROX_BT, engine_BT=BEHAV_BT, advantages_BT=None):
    """The loss at ratio pi_theta / pi_prox = 1, where PPO's loss per token is -A."""
    logp_BT = old_BT.clone().requires_grad_()
    loss, metrics = micro_batch_loss(
        logprobs_BT=logp_BT,
        old_logprobs_BT=old_BT,
        ref_logprobs_BT=None,
        engine_logprobs_BT=engine_BT,
        advantages_BT=torch.ones(2, 3) if advantages_BT is None else advantages_BT,
        loss_mask_BT=MASK_BT,
        norm=LossNorm(tokens=5, sequences=2),
        cfg=cfg,
        beta=0.0,
    )
    loss.backward()
    return loss, metrics, logp_BT.grad


def test_the_weight_scales_the_loss_and_its_gradient_but_has_none_itself():
    # token_mask keeps 1, 1.5, 0.8 of the five tokens: loss = -(1 + 1.5 + 0.8) / 5
    loss, metrics, grad_BT = _loss(AlgoConfig(correction="token_mask"))
    assert loss.item() == pytest.approx(-3.3 / 5)
    assert metrics["correction/weight"].item() == pytest.approx(3.3 / 5)
    assert metrics["correction/masked_frac"].item() == pytest.approx(2 / 5)
    # d(-r A w / 5)/d logp = -w / 5 at r = 1: the weight is a constant of the gradient
    expected_BT = -torch.tensor([[1.0, 0, 0], [1.5, 0.8, 0]]) / 5
    torch.testing.assert_close(grad_BT, expected_BT)
    assert "tis/weight" not in metrics


def _tis_as_it_was(cap: float):
    """The loss of the tis_cap code path before algo.correction, written out."""
    g = torch.Generator().manual_seed(0)
    old_BT = -torch.rand(2, 3, generator=g) * 3
    engine_BT = old_BT + torch.randn(2, 3, generator=g)
    engine_BT[0, 0] = old_BT[0, 0] + 30  # r = e^-30: below any bound, kept as it was
    adv_BT = torch.randn(2, 3, generator=g)
    logp_BT = (old_BT + 0.1 * torch.randn(2, 3, generator=g)).requires_grad_()
    ratio_BT = (logp_BT - old_BT).exp()
    surrogate_BT = -torch.minimum(ratio_BT * adv_BT, ratio_BT.clamp(0.8, 1.2) * adv_BT)
    weight_BT = (old_BT - engine_BT).exp().clamp(max=cap)
    loss = (surrogate_BT * weight_BT * MASK_BT).sum() / 5
    loss.backward()
    return (old_BT, engine_BT, adv_BT, logp_BT.detach()), loss, logp_BT.grad, weight_BT


@pytest.mark.parametrize("algo", [{"tis_cap": 1.5}, {"tis_cap": 1.5, "correction": "tis"}])
def test_tis_is_the_old_tis_cap_path(algo):
    (old_BT, engine_BT, adv_BT, logp0_BT), expected, expected_grad, weight_BT = _tis_as_it_was(1.5)
    cfg = AlgoConfig(**algo)
    assert correction_name(cfg) == "tis"  # tis_cap alone, with correction auto, is tis
    logp_BT = logp0_BT.clone().requires_grad_()
    loss, metrics = micro_batch_loss(
        logprobs_BT=logp_BT,
        old_logprobs_BT=old_BT,
        ref_logprobs_BT=None,
        engine_logprobs_BT=engine_BT,
        advantages_BT=adv_BT,
        loss_mask_BT=MASK_BT,
        norm=LossNorm(tokens=5, sequences=2),
        cfg=cfg,
        beta=0.0,
    )
    loss.backward()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    torch.testing.assert_close(logp_BT.grad, expected_grad)
    mask = MASK_BT.bool()
    assert metrics["tis/weight"].item() == pytest.approx(float(weight_BT[mask].sum() / 5))
    capped = float((weight_BT[mask] >= 1.5).sum() / 5)
    assert metrics["tis/capped_frac"].item() == pytest.approx(capped)


def test_auto_without_a_run_is_tis_with_a_cap_and_none_without():
    assert correction_name(AlgoConfig()) == "none"
    assert correction_name(AlgoConfig(tis_cap=2.0)) == "tis"
    assert correction_name(AlgoConfig(correction="m2po", tis_cap=2.0)) == "m2po"


@pytest.mark.parametrize("cap", ["null", "2.0"])
def test_a_synchronous_run_resolves_auto_as_the_algo_section_alone_does(cap):
    run = load_config("tiny-arith", [f"algo.tis_cap={cap}"])  # rollout.max_staleness=0
    alone = AlgoConfig(tis_cap=run.algo.tis_cap)
    assert run.algo.correction == correction_name(alone) == ("none" if cap == "null" else "tis")


def test_m2po_cutoff_drops_ties_with_the_smallest_dropped_value():
    # sorted: 4, 1, 1, 0 -> means of what is left 1.5, 0.667, 0.5, 0: under 0.6 after two;
    # the bound is 1, so the other 1 goes too (kept mean 0, still under the threshold)
    assert m2po_cutoff(torch.tensor([1.0, 0.0, 4.0, 1.0]), threshold=0.6) == 1.0
    assert m2po_cutoff(torch.tensor([0.01, 0.02]), threshold=0.04) == math.inf
    # no suffix under the threshold: all but the smallest go
    assert m2po_cutoff(torch.tensor([3.0, 2.0, 1.0]), threshold=0.5) == 2.0


# Per staleness level: lags and log r = d per token (all six are loss tokens)
LAG_BT = torch.tensor([[0, 1, 2], [0, 2, 2]])
LN2 = math.log(2)
D_BT = torch.tensor([[0.0, LN2, -LN2], [0.0, LN2, -LN2]])
# k3 = e^d - 1 - d: 0 at d = 0, 1 - ln2 at ln2, ln2 - 1/2 at -ln2
#   lag 0: tokens (0,0), (1,0): kl 0, ratio 1, |d| 0, share 2/6
#   lag 1: token (0,1): kl 1 - ln2, ratio 2, |d| ln2, share 1/6
#   lag 2: tokens (0,2), (1,1), (1,2): kl (2 (ln2 - 1/2) + 1 - ln2) / 3 = ln2 / 3,
#          ratio (0.5 + 2 + 0.5) / 3 = 1, |d| ln2, share 3/6
EXPECTED_LAGS = {
    "offpolicy/lag0/kl": 0.0,
    "offpolicy/lag0/ratio_mean": 1.0,
    "offpolicy/lag0/abs_log_ratio": 0.0,
    "offpolicy/lag0/token_share": 2 / 6,
    "offpolicy/lag1/kl": 1 - LN2,
    "offpolicy/lag1/ratio_mean": 2.0,
    "offpolicy/lag1/abs_log_ratio": LN2,
    "offpolicy/lag1/token_share": 1 / 6,
    "offpolicy/lag2/kl": LN2 / 3,
    "offpolicy/lag2/ratio_mean": 1.0,
    "offpolicy/lag2/abs_log_ratio": LN2,
    "offpolicy/lag2/token_share": 3 / 6,
}


def _summed(parts: list[dict]) -> dict[str, float]:
    keys = parts[0].keys()
    assert all(p.keys() == keys for p in parts)  # every pass reports every level
    return {k: sum(float(p[k]) for p in parts) for k in keys}


@pytest.mark.parametrize("split", [[slice(0, 2)], [slice(0, 1), slice(1, 2)]])
def test_per_lag_statistics_add_up_over_micro_batches(split):
    norm = LossNorm(tokens=6, sequences=2)
    mask_BT = torch.ones(2, 3)
    parts = [offpolicy_parts(D_BT[s], LAG_BT[s], mask_BT[s], [0, 1, 2], norm=norm) for s in split]
    stats = offpolicy_stats(_summed(parts))
    assert stats.keys() == EXPECTED_LAGS.keys()
    for key, value in EXPECTED_LAGS.items():
        assert stats[key] == pytest.approx(value, abs=1e-6), key


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=31,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=True,
    )
    return Qwen2ForCausalLM(cfg).float()


def _batch(model) -> TrainingBatch:
    """4 rows x 6 positions, the last 3 generated; the engine's logprobs are the model's
    plus 0.3 (lag 1 tokens) or 0.6 (lag 2), the lag 0 tokens exact."""
    g = torch.Generator().manual_seed(1)
    ids_BT = torch.randint(1, 31, (4, 6), generator=g)
    mask_BT = torch.zeros(4, 6, dtype=torch.long)
    mask_BT[:, 3:] = 1
    with torch.no_grad():
        true_BT = TokenScorer(model, chunk_tokens=16)(ids_BT, torch.ones_like(ids_BT), mask_BT)[0]
    version_BT = torch.where(mask_BT.bool(), torch.tensor([[7], [6], [5], [7]]), -1)
    lag_BT = torch.where(mask_BT.bool(), 7 - version_BT, 0)
    return TrainingBatch(
        input_ids_BT=ids_BT,
        attention_mask_BT=torch.ones_like(ids_BT),
        loss_mask_BT=mask_BT,
        turn_index_BT=torch.where(mask_BT.bool(), 0, -1),
        advantages_BT=torch.tensor([[1.0], [-1.0], [0.5], [-0.5]]) * mask_BT,
        engine_logprobs_BT=(true_BT - 0.3 * lag_BT) * mask_BT,
        version_BT=version_BT,
    )


def _update(model, batch, *, micro: int, correction: str = "none", **algo):
    m = copy.deepcopy(model)
    metrics = policy_update(
        scorer=TokenScorer(m, chunk_tokens=16),
        optimizer=torch.optim.SGD(m.parameters(), lr=1.0),
        batch=batch,
        algo=AlgoConfig(correction=correction, **algo),
        train=TrainConfig(micro_batch_size=micro),
        mini_batch_size=len(batch),
        version=7,
    )
    return m, metrics


def test_the_update_logs_each_staleness_level(model):
    _, metrics = _update(model, _batch(model), micro=2)
    # d = log pi_prox - log pi_behav = 0.3 * lag on every token of the level
    for lag in (0, 1, 2):
        d = 0.3 * lag
        assert metrics[f"offpolicy/lag{lag}/kl"] == pytest.approx(math.exp(d) - 1 - d, abs=1e-5)
        assert metrics[f"offpolicy/lag{lag}/ratio_mean"] == pytest.approx(math.exp(d), rel=1e-5)
        assert metrics[f"offpolicy/lag{lag}/abs_log_ratio"] == pytest.approx(d, abs=1e-5)
    assert metrics["offpolicy/lag0/token_share"] == pytest.approx(0.5)  # rows 0 and 3
    assert metrics["offpolicy/ratio_max"] == pytest.approx(math.exp(0.6), rel=1e-5)
    assert not [key for key in metrics if key.endswith("_part")]
    alarms = mismatch_alarms(metrics, threshold=0.1)
    assert len(alarms) == 1 and "(lag 2)" in alarms[0]  # k3 at 0.6 is 0.222, at 0.3 0.05


def test_m2po_masks_over_the_whole_step_whatever_the_micro_batch(model):
    # (log r)^2 is 0 (6 tokens), 0.09 (3), 0.36 (3); largest first, the means of what is
    # left are 0.1125, 0.09, 0.063, 0.03: under 0.05 once the lag-2 row is gone
    one, m_one = _update(model, _batch(model), micro=4, correction="m2po", m2po_threshold=0.05)
    split, m_split = _update(model, _batch(model), micro=1, correction="m2po", m2po_threshold=0.05)
    assert m_one["correction/masked_frac"] == pytest.approx(3 / 12)
    assert m_split["correction/masked_frac"] == pytest.approx(3 / 12)
    for (name, a), b in zip(one.named_parameters(), split.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)


def test_mismatch_alarms_name_the_lag_the_kl_the_key_and_the_fix():
    metrics = {"offpolicy/lag0/kl": 0.001, "offpolicy/lag3/kl": 0.2, "offpolicy/lag1/kl": 0.06}
    alarms = mismatch_alarms(metrics, threshold=0.05)
    assert len(alarms) == 2
    assert alarms[0].startswith("tokens 1 weight version old (lag 1)")
    assert "0.2" in alarms[1] and "algo.mismatch_alarm=0.05" in alarms[1]
    assert "rollout.max_staleness" in alarms[1] and "algo.correction" in alarms[1]
    assert mismatch_alarms(metrics, threshold=0.5) == []


def test_token_mean_of_the_weights_is_what_the_metric_reports():
    out = CORRECTIONS["seq_tis"](CorrectionInputs(PROX_BT, BEHAV_BT, MASK_BT), cfg=AlgoConfig())
    mean = token_mean(out.weight_BT, MASK_BT.float(), norm=LossNorm(tokens=5, sequences=2))
    assert mean.item() == pytest.approx((3 * 0.75 + 2 * 1.2) / 5)
