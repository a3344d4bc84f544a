"""The `algo` section: advantage estimator, policy loss, KL and off-policy correction.
Imports no torch. (``config/algorithms.py`` holds the presets that ``algo.name`` fills in.)"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from grouprl.algo.correction_choice import CORRECTION_NAMES
from grouprl.algo.traits import ESTIMATORS
from grouprl.config.algorithms import with_preset
from grouprl.config.section import Section


class AlgoConfig(Section):
    name: Literal[
        "grpo", "dr_grpo", "gspo", "dapo", "rloo", "reinforce_pp", "ppo", "mt_grpo", "distill"
    ] = "grpo"
    """The algorithm preset: it fills in the keys below that the recipe leaves out (its
    paper's choices, listed in `config/algorithms.py` and docs/algorithms.md); keys the
    recipe or an override sets win."""

    @model_validator(mode="before")
    @classmethod
    def _fill_preset(cls, data: object) -> object:
        return with_preset(data) if isinstance(data, dict) else data

    advantage: Literal[tuple(ESTIMATORS)] = "grpo"  # type: ignore[valid-type]
    """Advantage estimator (the rows of `algo/traits.py`): `grpo` (group-normalised),
    `dr_grpo` (group mean-centred, no std), `rloo` (leave-one-out baseline), `reinforce_pp`
    (batch-whitened returns), `reinforce_pp_baseline` (group-centred, then batch-whitened),
    `gae` (generalised advantage estimation with the critic's values; PPO), `mt_grpo`
    (multi-turn: outcome plus turn-level advantage on the turns up to the first tool result),
    `turn_returns` (multi-turn: discounted per-turn returns, group baseline)."""
    scale_by_std: bool = True
    """`grpo`, `mt_grpo`, `turn_returns`: divide group-centred rewards by the group's std
    (false: Dr.GRPO's centring only, TRL's `scale_rewards: none`)."""
    adv_std: Literal["population", "sample"] = "population"
    """The std that advantages are divided by (the group's, or the batch's when whitening):
    `population` (divide by n: each group's advantages have unit variance) or `sample`
    (divide by n - 1, as TRL and verl)."""
    adv_eps: float = Field(default=1e-6, ge=0)
    """Added to the std before dividing (TRL: 1e-4; verl: 1e-6)."""
    gamma: float = Field(default=1.0, ge=0, le=1)
    """Discount: per generated token for `gae` (tool replies between turns are skipped), per
    model turn for `turn_returns`."""
    gae_lambda: float = Field(default=1.0, ge=0, le=1)
    """`gae`: lambda, trading the critic's bias (0) against return variance (1)."""
    turn_advantage_coef: float = Field(default=1.0, ge=0)
    """`mt_grpo`: weight of the turn-level advantage (0 gives plain GRPO on the outcome)."""
    policy_loss: Literal["ppo_clip", "gspo", "gspo_token", "clip_cov", "kl_cov"] = "ppo_clip"
    """Policy loss (registry `algo.losses.POLICY_LOSSES`): `ppo_clip` (token ratios), `gspo`
    (sequence ratio, sequence clip), `gspo_token` (GSPO with per-token advantages),
    `clip_cov` (`ppo_clip`, and a few tokens of high covariance between advantage and
    logprob held back: Clip-Cov), `kl_cov` (no clip; a KL penalty on the tokens of highest
    covariance: KL-Cov). The last two keep the entropy from collapsing (docs/entropy.md)."""
    clip_eps_low: float = Field(default=0.2, ge=0)
    """Ratio clip below 1 - eps_low."""
    clip_eps_high: float = Field(default=0.2, ge=0)
    """Ratio clip above 1 + eps_high (DAPO's clip-higher: larger than eps_low)."""
    cov_ratio: float = Field(default=2e-4, gt=0, le=1)
    """`clip_cov`, `kl_cov`: the share of the loss tokens held back (Cui et al. 2025: 2e-4
    for Clip-Cov; 2e-3 for KL-Cov at 7B, 2e-4 at 32B)."""
    clip_cov_bounds: tuple[float, float] = (1.0, 5.0)
    """`clip_cov`: the band [low, high] of covariance the held-back tokens are drawn from."""
    kl_cov_coef: float = Field(default=1.0, ge=0)
    """`kl_cov`: the coefficient of the penalty |log pi - log pi_old| on the held-back tokens."""
    entropy_coef: float = Field(default=0.0, ge=0)
    """Entropy bonus: the loss gains -c x the policy's token entropy (aggregated as
    `loss_agg`), which pushes the entropy up (verl's `entropy_coeff`); 0: none. With
    `entropy_target`, the adaptive coefficient's start."""
    entropy_target: float | None = Field(default=None, gt=0)
    """Adaptive entropy coefficient (Skywork-OR1): after each step the coefficient grows by
    `entropy_coef_delta` while the mean token entropy is below this target and shrinks (to
    0 at least) while above, and the bonus acts only below it; null: the coefficient stays
    `entropy_coef`."""
    entropy_coef_delta: float = Field(default=0.005, gt=0)
    """`entropy_target`: the coefficient's change per step."""
    top_entropy_quantile: float = Field(default=1.0, gt=0, le=1)
    """Train on the high-entropy tokens only ("Beyond the 80/20 Rule", TRL's key of the same
    name): the policy loss keeps this share of each micro-batch's generated tokens, those
    of highest entropy (the paper: 0.2); 1 keeps every token."""
    entropy_threshold: float = Field(default=0.672, gt=0)
    """The token entropy above which `entropy_high_frac` (logged every step) counts a token
    (0.672: the 80th percentile of the tokens in "Beyond the 80/20 Rule")."""
    dual_clip_c: float | None = Field(default=None, gt=1)
    """Dual-clip PPO: for negative advantages the `ppo_clip` loss is capped at -c * A
    (c > 1, the paper uses 3); null disables it."""
    beta: float = Field(default=0.0, ge=0)
    """KL coefficient to the frozen reference model (the initial one when `kl_target` is
    set); 0 loads no reference."""
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    """KL estimator (registry `algo.kl.KL_ESTIMATORS`)."""
    kl_in: Literal["loss", "reward"] = "loss"
    """Where the KL term goes: `loss` adds beta * KL to the per-token loss (GRPO);
    `reward` subtracts beta * KL from each token's reward before advantages (PPO, REINFORCE++)."""
    kl_bias_correction: bool = False
    """`kl_in: loss`: multiply each token's KL by the policy loss's importance ratio
    pi / pi_old, gradient included (TRL's `use_bias_correction_kl`, on by default in TRL
    1.16; DeepSeek-V3.2), making the KL gradient the unbiased reverse-KL gradient."""
    kl_target: float | None = Field(default=None, gt=0)
    """Adaptive KL controller (Ziegler et al. 2019): beta moves so the measured KL per
    token approaches this target; null keeps beta fixed."""
    kl_horizon: int = Field(default=10_000, ge=1)
    """Adaptive KL controller: samples over which beta may change by about 20%."""
    loss_agg: Literal["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"] = "token_mean"
    """Loss aggregation (registry `algo.aggregate.AGGREGATIONS`): `token_mean` (over all tokens,
    DAPO), `seq_mean_token_mean` (per-sequence mean, GRPO paper), `seq_mean_token_sum_norm`
    (token sums over a constant length `norm_tokens`, Dr.GRPO)."""
    norm_tokens: int | None = Field(default=None, ge=1)
    """Dr.GRPO's constant normaliser for `seq_mean_token_sum_norm`; null: rollout.max_tokens."""
    num_iterations: int = Field(default=1, ge=1)
    """Updates per batch (mu), reusing the logprobs of the policy that sampled it."""
    old_logprobs: Literal["trainer", "engine"] = "trainer"
    """The PPO ratio's denominator: `trainer` (the trainer's logprobs of the batch before
    the update: one extra pass when the batch feeds several updates), or `engine` (the
    engine's sampling logprobs: no extra pass; trainer/engine numerics enter the ratio)."""
    dynamic_sampling: bool = False
    """DAPO: drop groups whose rewards are all equal (zero advantage) and sample more
    prompts until `data.batch_size` groups with signal are collected."""
    max_sampling_rounds: int = Field(default=3, ge=1)
    """DAPO: generation rounds per step at most (the first included). When the cap is hit,
    the batch is filled with dropped groups and a warning says so."""
    overlong_buffer: int | None = Field(default=None, ge=1)
    """DAPO's overlong reward shaping: completions longer than rollout.max_tokens minus
    this many tokens lose reward linearly, up to `overlong_penalty` at max_tokens; null: off."""
    overlong_penalty: float = Field(default=1.0, ge=0)
    """DAPO: the reward lost by a completion of rollout.max_tokens tokens."""
    mask_truncated: bool = False
    """DAPO's overlong filtering: completions cut off at rollout.max_tokens get no loss."""
    tis_cap: float | None = Field(default=None, ge=1)
    """The cap of the importance weight pi_trainer / pi_engine in the `decoupled`, `tis`
    and `seq_tis` corrections; null: the correction's own default (decoupled 5, tis and
    seq_tis 2). Set alone (with `correction: auto`) it chooses `tis`, as it always did."""
    correction: Literal[("auto", *CORRECTION_NAMES)] = "auto"  # type: ignore[valid-type]
    """How the loss corrects for samples drawn by another policy than the trainer's (the
    engine's numerics, and stale weights with `rollout.max_staleness`), `algo/corrections.py`
    and docs/async.md: `decoupled` (AReaL's decoupled PPO: tokens weighted by
    pi_prox / pi_behaviour, those above the cap masked), `tis` (per-token weights truncated
    at the cap), `seq_tis` (one truncated weight per sequence), `token_mask` (IcePop: tokens
    whose ratio leaves `is_band` masked), `seq_mask` (sequences whose ratio leaves `is_band`
    masked), `m2po` (M2PO: the tokens with the largest squared log-ratio masked until its
    mean is under `m2po_threshold`), `none`. `auto`: `tis` with `tis_cap` set, else
    `decoupled` with `rollout.max_staleness` > 0, else `none`."""
    is_band: tuple[float, float] = (0.5, 2.0)
    """`token_mask` and `seq_mask`: the band [low, high] the importance ratio must stay in."""
    m2po_threshold: float = Field(default=0.04, gt=0)
    """`m2po`: the bound on the mean squared log-ratio of the tokens that stay in the loss."""
    teacher_coef: float = Field(default=0.0, ge=0)
    """On-policy distillation (docs/distillation.md): each generated token's advantage
    gains c x (log pi_teacher - log pi_sampler) of that token, the negative reverse KL to
    the `teacher:` model, undiscounted, added to the task reward's advantage; 0: no
    teacher term. `algo.name=distill` sets 1; with another preset it combines a teacher
    with the task reward. Needs a `teacher:` section."""
    teacher_top_k: int = Field(default=0, ge=0, le=100)
    """On-policy distillation's divergence: 0, the sampled-token reverse KL above, in the
    advantage (Thinking Machines'); k > 0, the forward KL from the teacher's k most likely
    next tokens to the student at every generated token, a term of the loss weighted by
    `teacher_coef` (GKD's at beta = 0, on the student's samples). The teacher returns k
    logprobs per token. It moves the student where it is sure and wrong, which the
    sampled-token term barely does (docs/distillation.md)."""
    mismatch_alarm: float = Field(default=0.05, gt=0)
    """A warning when a step's mean per-token KL between the engine's (behaviour) and the
    trainer's policy, at any staleness level, passes this (`offpolicy/lag<k>/kl`)."""
