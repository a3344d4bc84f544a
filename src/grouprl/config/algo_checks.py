"""The ``algo`` section's cross-field checks: what the advantage estimator needs (a critic,
per-sequence advantages, turns), the loss's keys, the off-policy correction against the
rollout's staleness, the critic's warmup, and the teacher term's teacher. No torch here."""

from __future__ import annotations

from grouprl.algo.traits import ESTIMATORS, EstimatorTraits
from grouprl.algo.traits import per_token_advantages as estimator_per_token
from grouprl.config.algo_section import AlgoConfig
from grouprl.config.errors import show
from grouprl.config.schema import RunConfig


def algo_problems(cfg: RunConfig) -> list[str]:
    """The ``algo`` section's problems against the rest of the run (the module's list)."""
    traits = ESTIMATORS[cfg.algo.advantage]
    return [
        *_value_model_problems(cfg, traits),
        *_estimator_problems(cfg, traits),
        *_loss_problems(cfg),
        *_correction_problems(cfg),
        *_critic_warmup_problems(cfg),
        *_teacher_problems(cfg),
    ]


def _value_model_problems(cfg: RunConfig, traits: EstimatorTraits) -> list[str]:
    """A critic exactly when the estimator uses values."""
    algo, critic = cfg.algo, cfg.critic
    problems = []
    if traits.needs_values and critic is None:
        problems.append(
            f"algo.advantage=gae{' (algo.name=ppo)' if algo.name == 'ppo' else ''} needs a "
            "value model, and the config has no critic: section. Set critic.path to a causal "
            "LM of the policy's family (e.g. critic.path=builtin:tiny-arith, or the policy's "
            "model.path) or choose a critic-free algorithm (algo.name=grpo)."
        )
    if critic is not None and not traits.needs_values:
        problems.append(
            f"critic.path={show(critic.path)} loads a value model, but algo.advantage="
            f"{algo.advantage} does not use values; set critic=null, or algo.name=ppo "
            "(algo.advantage=gae) to train with the critic."
        )
    return problems


def _estimator_problems(cfg: RunConfig, traits: EstimatorTraits) -> list[str]:
    """GSPO needs one advantage per sequence; a turn-level estimator needs turns."""
    algo = cfg.algo
    problems = []
    if algo.policy_loss == "gspo" and per_token_advantages(cfg):
        if algo.teacher_coef > 0 and algo.teacher_top_k == 0:
            why = f"algo.teacher_coef={show(algo.teacher_coef)} gives each token its own"
        elif traits.needs_values:
            why = f"{algo.advantage} gives each token its own advantage"
        elif traits.token_returns:
            why = f"algo.kl_in=reward makes {algo.advantage}'s returns differ per token"
        else:
            why = f"{algo.advantage} gives the tokens of different turns different advantages"
        problems.append(
            f"algo.policy_loss=gspo uses one advantage per sequence (the mean of its tokens'), "
            f"but {why}, so GSPO would average them away. Use algo.policy_loss=gspo_token "
            "(GSPO's per-token form) or a per-sequence estimator (algo.advantage=grpo)."
        )
    if traits.needs_turns and cfg.env.name == "single_turn":
        problems.append(
            f"algo.advantage={algo.advantage} credits the turns of multi-turn episodes, but "
            "env.name=single_turn has one turn and no turn rewards; set env.name=search_qa "
            "(a tool-using agent) or algo.advantage=grpo."
        )
    return problems


def _loss_problems(cfg: RunConfig) -> list[str]:
    """Loss keys that cannot work with the rest: dual clip, dynamic sampling, the adaptive
    KL and the overlong buffer."""
    algo = cfg.algo
    problems = []
    if algo.dual_clip_c is not None and algo.policy_loss not in ("ppo_clip", "clip_cov"):
        problems.append(
            f"algo.dual_clip_c={show(algo.dual_clip_c)} applies to token ratios "
            f"(algo.policy_loss=ppo_clip or clip_cov), not to algo.policy_loss="
            f"{algo.policy_loss}; set algo.dual_clip_c=null."
        )
    problems += _ignored_keys(algo, chooser="policy_loss", table=LOSS_KEYS)
    delta_default = AlgoConfig.model_fields["entropy_coef_delta"].default
    if algo.entropy_target is None and algo.entropy_coef_delta != delta_default:
        problems.append(
            f"algo.entropy_coef_delta={show(algo.entropy_coef_delta)} would be ignored: it is "
            "the adaptive entropy coefficient's step, which algo.entropy_target turns on. Set "
            "algo.entropy_target (e.g. 0.2) or remove algo.entropy_coef_delta."
        )
    if algo.dynamic_sampling and cfg.rollout.n < 2:
        problems.append(
            f"algo.dynamic_sampling=true with rollout.n={cfg.rollout.n}: it drops groups whose "
            "rewards are all equal, and a group of one always is, so no batch could be "
            "filled. Set rollout.n to 2 or more, or algo.dynamic_sampling=false."
        )
    if algo.kl_target is not None and algo.beta == 0:
        problems.append(
            f"algo.kl_target={show(algo.kl_target)} adapts the KL coefficient from its "
            "starting value algo.beta, which is 0 (no reference model, no KL). Set "
            "algo.beta to a starting coefficient (e.g. 0.01) or algo.kl_target=null."
        )
    buffer = algo.overlong_buffer
    if buffer is not None and buffer >= cfg.rollout.max_tokens:
        problems.append(
            f"algo.overlong_buffer={buffer} must be smaller than rollout.max_tokens="
            f"{cfg.rollout.max_tokens}: the penalty starts at max_tokens - buffer tokens. "
            f"DAPO uses a fifth of max_tokens: algo.overlong_buffer={cfg.rollout.max_tokens // 5}."
        )
    return problems


def _correction_problems(cfg: RunConfig) -> list[str]:
    """Stale samples need a correction; the staleness keys need staleness; a correction's
    keys need that correction; IcePop's band must hold 1."""
    algo = cfg.algo
    problems = []
    stale = cfg.rollout.max_staleness
    if stale and algo.correction == "none" and algo.old_logprobs == "trainer":
        problems.append(
            f"rollout.max_staleness={stale} trains on samples drawn with older weights, and "
            "algo.correction=none corrects nothing: leave algo.correction at auto (decoupled "
            "PPO), choose another correction, set algo.old_logprobs=engine (the PPO ratio "
            "against the sampling policy itself), or rollout.max_staleness=0."
        )
    for key, value, default in (
        ("staleness_policy", cfg.rollout.staleness_policy, "wait"),
        ("partial_rollout_tokens", cfg.rollout.partial_rollout_tokens, None),
    ):
        if not stale and value != default:
            problems.append(
                f"rollout.{key}={value} would be ignored: rollout.max_staleness=0 generates "
                "each batch after the last update, with nothing in flight. Set "
                f"rollout.max_staleness >= 1 or remove rollout.{key}."
            )
    problems += _ignored_keys(algo, chooser="correction", table=CORRECTION_KEYS)
    low, high = algo.is_band
    if not 0 <= low < 1 < high:
        problems.append(
            f"algo.is_band={[low, high]} must hold the ratio 1 inside it, 0 <= low < 1 < high "
            "(IcePop uses [0.5, 2.0])."
        )
    return problems


def _critic_warmup_problems(cfg: RunConfig) -> list[str]:
    critic, steps = cfg.critic, cfg.train.steps
    if critic is not None and steps is not None and critic.warmup_steps >= steps:
        return [
            f"critic.warmup_steps={critic.warmup_steps} leaves no step of train.steps={steps} "
            "for the policy to learn in; lower critic.warmup_steps or raise train.steps."
        ]
    return []


def _teacher_problems(cfg: RunConfig) -> list[str]:
    """A teacher term needs a teacher (a teacher without a term: ``config/teacher.py``);
    dynamic sampling would drop the groups the teacher term teaches."""
    algo, teacher = cfg.algo, cfg.teacher
    fix = (
        "Set teacher.path to a model with the policy's tokenizer and chat format (e.g. "
        "teacher.path=builtin:tiny-arith-teacher for builtin:tiny-arith)"
    )
    if algo.teacher_coef > 0 and teacher is None:
        if algo.name == "distill":
            return [
                "algo.name=distill learns from a teacher model, and the config has no "
                f"teacher: section. {fix}, or choose algo.name=grpo to learn from the task "
                "reward alone."
            ]
        return [
            f"algo.teacher_coef={show(algo.teacher_coef)} weights a teacher term, and the "
            f"config has no teacher: section. {fix}, or set algo.teacher_coef=0."
        ]
    problems = []
    if algo.teacher_coef == 0 and algo.name == "distill" and teacher is None:
        # with a teacher: config/teacher.teacher_problems says it is given no term
        problems.append(
            "algo.name=distill with algo.teacher_coef=0 has no teacher term: it would train "
            "on the task reward alone. Set algo.teacher_coef > 0 (the preset's 1.0) and a "
            "teacher: section, or algo.name=grpo."
        )
    if algo.teacher_top_k > 0 and algo.teacher_coef == 0:
        problems.append(
            f"algo.teacher_top_k={algo.teacher_top_k} chooses the teacher term's divergence, "
            "but algo.teacher_coef=0 turns the term off: set algo.teacher_coef > 0 (with a "
            "teacher: section), or algo.teacher_top_k=0."
        )
    if algo.teacher_coef > 0 and algo.dynamic_sampling:
        problems.append(
            "algo.dynamic_sampling=true drops groups whose rewards are all equal, but "
            f"algo.teacher_coef={show(algo.teacher_coef)} gives such groups a per-token signal "
            "(and a pure distillation recipe's rewards are all equal): set "
            "algo.dynamic_sampling=false."
        )
    return problems


def per_token_advantages(cfg: RunConfig) -> bool:
    """Whether the advantage estimator (or the sampled-token teacher term) can give the
    tokens of one sample different values."""
    algo = cfg.algo
    kl_rewards = algo.kl_in == "reward" and algo.beta > 0
    in_advantage = algo.teacher_coef > 0 and algo.teacher_top_k == 0  # top k: in the loss
    return in_advantage or estimator_per_token(algo.advantage, kl_rewards=kl_rewards)


CORRECTION_KEYS = {
    "tis_cap": ("decoupled", "tis", "seq_tis"),
    "is_band": ("token_mask", "seq_mask"),
    "m2po_threshold": ("m2po",),
}
"""The ``algo`` keys each correction reads; set with another correction they are ignored."""

LOSS_KEYS = {
    "cov_ratio": ("clip_cov", "kl_cov"),
    "clip_cov_bounds": ("clip_cov",),
    "kl_cov_coef": ("kl_cov",),
}
"""The ``algo`` keys each policy loss reads; set with another loss they are ignored."""


def _ignored_keys(
    algo: AlgoConfig, *, chooser: str, table: dict[str, tuple[str, ...]]
) -> list[str]:
    """A setting of ``table`` given with a choice of ``algo.<chooser>`` that does not read
    it is refused."""
    defaults, values = AlgoConfig.model_fields, algo.model_dump()
    chosen = values[chooser]
    problems = []
    for key, users in table.items():
        value = values[key]
        if chosen not in users and value != defaults[key].default:
            problems.append(
                f"algo.{key}={show(value)} would be ignored: algo.{chooser}={chosen} "
                f"does not read it (only {', '.join(users)} do). Remove algo.{key} or "
                f"choose one of those."
            )
    return problems
