"""``grouprl plan``: every derived quantity of a run, with the arithmetic shown.

Only rich here: no torch, vllm, ray or transformers (the CLI test checks).
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from grouprl.algo.traits import ESTIMATORS, keys_read
from grouprl.config.algo_checks import per_token_advantages
from grouprl.config.algorithms import ALGORITHMS
from grouprl.config.checks import Derived
from grouprl.config.errors import show
from grouprl.config.model_data import DataSource
from grouprl.config.reward import RewardFunction
from grouprl.config.schema import RunConfig
from grouprl.host.namespaces import host_socket_isolation, network_isolation
from grouprl.plan.async_rows import async_rows
from grouprl.plan.batch_rows import batch_rows, token_rows
from grouprl.plan.env_rows import env_rows
from grouprl.plan.layout import PlanView, Section
from grouprl.plan.reward_model_rows import reward_model_rows
from grouprl.plan.rollout_rows import rollout_rows
from grouprl.plan.rows import Row, memory_rows, model_rows
from grouprl.plan.target import Target, plan_target
from grouprl.plan.teacher_rows import teacher_rows

LATER = "computed after the dataset loads"


def render_plan(
    cfg: RunConfig, derived: Derived, *, here: bool = False, reward_styles: Sequence[str] = ()
) -> PlanView:
    """The title and ``plan_sections``, as a table or stacked rows for the width they are
    printed at (``plan/layout.py``)."""
    title = Text.assemble(("plan: ", "bold"), (cfg.name, "bold green"))
    if cfg.description:
        title.append(f"  {cfg.description}", style="dim")
    return PlanView(title, plan_sections(cfg, derived, here=here, reward_styles=reward_styles))


def plan_sections(
    cfg: RunConfig, derived: Derived, *, here: bool = False, reward_styles: Sequence[str] = ()
) -> list[Section]:
    """Run, batch, length, tokens, algorithm, rollout, async (``plan/async_rows.py``),
    models, memory per GPU and output rows, for the machines the recipe describes
    (``here``: this one, ``plan/target.py``). ``reward_styles``: how each reward function
    is called (grouprl, verl or trl, ``rewards.registry.call_style``: the caller resolves
    them, a layer above), shown in the reward row; empty: not shown."""
    target = plan_target(cfg, here=here)
    return [
        ("run", _run_rows(cfg, derived, target)),
        ("batch", batch_rows(cfg, derived)),
        ("length", _length_rows(cfg, derived)),
        ("tokens", token_rows(cfg, derived)),
        ("algorithm", _algo_rows(cfg, derived, reward_styles)),
        ("environment", env_rows(cfg)),
        ("rollout", rollout_rows(cfg, target)),
        *([("teacher", teacher_rows(cfg, target))] if cfg.teacher is not None else []),
        ("async", async_rows(cfg)),
        ("models", model_rows(cfg, derived) + reward_model_rows(cfg)),
        ("memory per GPU", memory_rows(cfg, derived)),
        ("output", _output_rows(cfg, derived)),
    ]


def _source_text(source: DataSource) -> str:
    text = source.label
    if source.subset:
        text += f" ({source.subset})"
    return f"{text}, split {source.split}"


def _rows_text(rows: int | None, source: DataSource) -> str:
    if rows is None:
        return "unknown" if source.limit is None else f"<= {source.limit}"
    return f"{rows:,}"


def _run_rows(cfg: RunConfig, d: Derived, target: Target) -> list[Row]:
    rows = [
        ("model", cfg.model.path, f"dtype {cfg.model.dtype}"),
        ("device", target.device, target.why),
        (
            "train prompts",
            _rows_text(d.train_rows, cfg.data.train),
            _source_text(cfg.data.train)
            + ("" if d.train_rows is not None else f"; row count {LATER}"),
        ),
    ]
    if cfg.data.eval is None:
        rows.append(("eval prompts", "none", "data.eval=null: no validation"))
    else:
        rows.append(
            ("eval prompts", _rows_text(d.eval_rows, cfg.data.eval), _source_text(cfg.data.eval))
        )
    return rows


def _length_rows(cfg: RunConfig, d: Derived) -> list[Row]:
    if d.total_steps is None:
        return [
            ("training steps", "later", f"train.epochs={show(cfg.train.epochs)}; {LATER}"),
            ("epochs", show(cfg.train.epochs), "train.epochs"),
        ]
    steps_how = (
        "train.steps"
        if cfg.train.steps is not None
        else f"{show(cfg.train.epochs)} epochs x {d.train_rows:,} rows / {d.prompts_per_step} "
        "prompts, rounded up (batches run across epochs)"
    )
    rows = [
        ("training steps", str(d.total_steps), steps_how),
        (
            "optimizer updates",
            f"{d.total_optimizer_steps:,}",
            f"{d.total_steps} steps x {d.optimizer_steps_per_step}",
        ),
        (
            "samples generated",
            f"{d.total_steps * d.samples_per_step:,}",
            f"{d.total_steps} steps x {d.samples_per_step}",
        ),
    ]
    if d.epochs is not None and cfg.train.steps is not None:
        rows.append(
            (
                "epochs",
                f"{d.epochs:.3g}",
                f"{d.total_steps} steps x {d.prompts_per_step} prompts / {d.train_rows:,} rows",
            )
        )
    elif d.epochs is None:
        rows.append(("epochs", "later", LATER))
    return rows


POLICY_LOSSES = {
    "ppo_clip": "PPO clipped surrogate on token ratios",
    "gspo": "GSPO: one sequence ratio (geometric mean of token ratios), one advantage per sample",
    "gspo_token": "GSPO's sequence ratio with per-token advantages",
}
RATIO_LEVEL = {"ppo_clip": "per token", "gspo": "per sequence", "gspo_token": "per sequence"}


def _algo_rows(cfg: RunConfig, d: Derived, reward_styles: Sequence[str]) -> list[Row]:
    algo, train = cfg.algo, cfg.train
    preset = ALGORITHMS[algo.name]
    rewards = ", ".join(
        _reward_text(f, reward_styles[i] if i < len(reward_styles) else None)
        for i, f in enumerate(cfg.reward.functions)
    )
    r = cfg.reward.sandbox
    memory = "no memory limit" if r.memory_mb is None else f"{r.memory_mb} MB each"
    contained = f"in {r.workers} worker processes ({memory}), {show(r.timeout_s)} s per call"
    warmup = f", {train.warmup_steps} warmup steps" if train.warmup_steps else ""
    iters = "pass" if algo.num_iterations == 1 else "passes"
    return [
        ("algorithm", algo.name, f"{preset.title}: {preset.paper}"),
        ("advantage", algo.advantage, _advantage_text(cfg)),
        ("policy loss", algo.policy_loss, POLICY_LOSSES[algo.policy_loss]),
        ("loss aggregation", algo.loss_agg, _aggregation_text(cfg)),
        *_clip_rows(cfg),
        _kl_row(cfg),
        *_dapo_rows(cfg),
        (
            "iterations per batch",
            str(algo.num_iterations),
            f"algo.num_iterations: {algo.num_iterations} {iters} over each step's samples, "
            "ratios taken to the policy that sampled them",
        ),
        ("reward", str(len(cfg.reward.functions)), f"weighted sum: {rewards}; {contained}"),
        _isolation_row(cfg),
        (
            "sampling",
            f"T={show(cfg.rollout.temperature)}",
            f"top_p {show(cfg.rollout.top_p)}, top_k {cfg.rollout.top_k}",
        ),
        ("learning rate", f"{train.lr:g}", f"{train.lr_schedule}{warmup}"),
    ]


def _reward_text(f: RewardFunction, style: str | None) -> str:
    """``name x weight (verl style, detected, per group)``: how it is called, and whether
    its parameters told (``style: auto``) or its ``style`` key did."""
    how = [f"{style} style, {'detected' if f.style == 'auto' else 'declared'}"] if style else []
    how += ["per group"] if f.scope == "group" else []
    return f"{f.name} x {show(f.weight)}" + (f" ({', '.join(how)})" if how else "")


def _isolation_row(cfg: RunConfig) -> Row:
    """Whether workers can be kept off the network, and off the host's Unix sockets, here
    (reward.network, env.network); which sections require it (*.sandbox.require_isolation,
    whose refusals ``driver/preflight.py`` lists among the failing checks)."""
    allowed, why = network_isolation()
    sockets, sockets_why = host_socket_isolation()
    off = [
        f"{k}.network=false"
        for k, on in (("reward", cfg.reward.network), ("env", cfg.env.network))
        if not on
    ]
    strict = [
        f"{k}.sandbox.require_isolation"
        for k, box in (("reward", cfg.reward.sandbox), ("env", cfg.env.sandbox))
        if box.require_isolation
    ]
    required = f"; required by {', '.join(strict)}" if strict else ""
    if allowed:
        value = "network namespaces" + (" + seccomp" if sockets else "")
        text = f"{why}; {sockets_why}; off for {', '.join(off) or 'none'}{required}"
        text += " (docs/sandbox.md)"
    else:
        value = "none here"
        effect = (
            f"{' and '.join(off)} cannot be kept: their workers keep the network"
            if off
            else "no key asks for it"
        )
        text = f"{why} ({effect}{required}; docs/sandbox.md)"
    return ("isolation", value, text)


def _advantage_text(cfg: RunConfig) -> str:
    algo = cfg.algo
    text = ESTIMATORS[algo.advantage].summary
    reads = keys_read(algo.advantage, scale_by_std=algo.scale_by_std)
    if "scale_by_std" in ESTIMATORS[algo.advantage].reads and not algo.scale_by_std:
        text += ", not scaled by std (algo.scale_by_std=false)"
    elif "adv_std" in reads:
        ddof = "population, ddof=0" if algo.adv_std == "population" else "sample, ddof=1"
        text += f", divided by the std ({ddof}) + {algo.adv_eps:g}"
    if ESTIMATORS[algo.advantage].needs_values:
        text += f", gamma {show(algo.gamma)}, lambda {show(algo.gae_lambda)}"
    per_token = per_token_advantages(cfg)
    return text + ("; one value per token" if per_token else "; one value per sample")


def _aggregation_text(cfg: RunConfig) -> str:
    agg = cfg.algo.loss_agg
    if agg == "token_mean":
        return "mean over every generated token of the mini-batch (DAPO)"
    if agg == "seq_mean_token_mean":
        return "each sequence's token mean, averaged over sequences (GRPO paper)"
    return (
        f"each sequence's token sum / {cfg.algo.norm_tokens} (algo.norm_tokens, a constant), "
        "averaged over sequences (Dr.GRPO)"
    )


def _ratio(x: float) -> str:
    return repr(round(x, 10))


def _clip_rows(cfg: RunConfig) -> list[Row]:
    algo = cfg.algo
    low, high = algo.clip_eps_low, algo.clip_eps_high
    interval = f"[{_ratio(1 - low)}, {_ratio(1 + high)}]"
    level = RATIO_LEVEL[algo.policy_loss]
    if level == "per sequence":
        level += f" ({algo.policy_loss})"
    rows = [
        (
            "clip range",
            interval,
            f"ratio clipped to {interval} {level}: 1 - {show(low)} (algo.clip_eps_low), "
            f"1 + {show(high)} (algo.clip_eps_high)",
        )
    ]
    if algo.dual_clip_c is not None:
        c = show(algo.dual_clip_c)
        rows.append(
            (
                "dual clip",
                f"c={c}",
                f"negative advantages: loss capped at -{c} x A (algo.dual_clip_c)",
            )
        )
    if algo.policy_loss != "ppo_clip" and max(low, high) >= 0.01:
        rows.append(
            (
                "note",
                "wide clip",
                "GSPO's sequence ratios stay close to 1, so this range rarely clips; the paper "
                "uses 3e-4 / 4e-4 (algo.clip_eps_low / clip_eps_high)",
            )
        )
    return rows


def _kl_row(cfg: RunConfig) -> Row:
    algo = cfg.algo
    if algo.beta == 0:
        return ("KL penalty", "off", "algo.beta=0: no KL term, no reference model loaded")
    where = (
        "added to the per-token loss"
        if algo.kl_in == "loss"
        else "subtracted from each token's reward before advantages"
    )
    if algo.kl_in == "loss" and algo.kl_bias_correction:
        where += " times the importance ratio (algo.kl_bias_correction, TRL's default)"
    control = "fixed (algo.kl_target=null)"
    if algo.kl_target is not None:
        control = (
            f"adaptive: beta moves so the KL per token approaches {show(algo.kl_target)} "
            f"(algo.kl_target), by about 20% per {algo.kl_horizon:,} samples (algo.kl_horizon)"
        )
    return (
        "KL penalty",
        f"beta={show(algo.beta)}",
        f"algo.beta={show(algo.beta)}: {algo.kl_estimator} KL to a frozen copy of the model, "
        f"{where} (algo.kl_in={algo.kl_in}); {control}",
    )


def _dapo_rows(cfg: RunConfig) -> list[Row]:
    algo, batch, max_tokens = cfg.algo, cfg.data.batch_size, cfg.rollout.max_tokens
    rows = []
    if algo.dynamic_sampling:
        rounds = algo.max_sampling_rounds
        rows.append(
            (
                "dynamic sampling",
                f"<= {rounds} rounds",
                "groups whose rewards are all equal are dropped and more prompts sampled: at "
                f"most {rounds} rounds (algo.max_sampling_rounds) x {batch} prompts "
                f"(data.batch_size) = {rounds * batch} prompts generated per step",
            )
        )
    if algo.overlong_buffer is not None:
        start = max_tokens - algo.overlong_buffer
        rows.append(
            (
                "overlong shaping",
                f"after {start} tokens",
                f"penalty starts after {max_tokens} (rollout.max_tokens) - "
                f"{algo.overlong_buffer} (algo.overlong_buffer) = {start} tokens, growing "
                f"linearly to {show(algo.overlong_penalty)} (algo.overlong_penalty) at "
                f"{max_tokens}",
            )
        )
    if algo.mask_truncated:
        rows.append(
            (
                "truncated completions",
                "masked",
                f"completions cut off at rollout.max_tokens={max_tokens} get no loss "
                "(algo.mask_truncated)",
            )
        )
    if algo.tis_cap is not None:
        cap = show(algo.tis_cap)
        rows.append(
            (
                "importance sampling",
                f"cap {cap}",
                f"truncated: each token's loss x min(pi_trainer / pi_engine, {cap}) "
                "(algo.tis_cap), correcting the engine's numerics",
            )
        )
    return rows


def _output_rows(cfg: RunConfig, d: Derived) -> list[Row]:
    trainer = cfg.trainer
    evals = f"every {trainer.eval_every} steps, " if trainer.eval_every else ""
    evals += "before training and " if trainer.eval_before_train else ""
    evals += "at the end"
    if cfg.data.eval is None:
        evals = "data.eval=null"
    return [
        ("run directory", d.run_dir, f"trainer.run_dir={show(trainer.run_dir)}"),
        ("resume", trainer.resume, "trainer.resume (auto: newest complete across tiers)"),
        *_checkpoint_rows(cfg, d),
        ("validation", "on" if cfg.data.eval is not None else "off", evals),
    ]


def _checkpoint_rows(cfg: RunConfig, d: Derived) -> list[Row]:
    ckpt = cfg.checkpoint
    namespace = ckpt.namespace.replace("{name}", cfg.name)

    def when(every: int | None) -> str:
        return (f"every {every} steps, " if every else "") + "at the end and on preemption"

    rows = []
    if ckpt.memory.every is not None:
        nodes = cfg.cluster.nodes
        where = (
            f"each node's {ckpt.memory.dir}/{namespace}: its part and a copy of a peer node's, "
            if nodes > 1
            else f"{ckpt.memory.dir}/{namespace}, "
        )
        rows.append(
            (
                "checkpoints: memory",
                f"every {ckpt.memory.every}",
                f"{where}keep {ckpt.memory.keep}, at most {show(ckpt.memory.max_gb)} GB"
                f"{' per node' if nodes > 1 else ''} (checkpoint.memory)",
            )
        )
    disk = ckpt.disk.dir or f"{d.run_dir}/checkpoints"
    rows.append(
        (
            "checkpoints: disk",
            f"every {ckpt.disk.every}" if ckpt.disk.every else "end only",
            f"{disk}, {when(ckpt.disk.every)}, keep {ckpt.disk.keep} (checkpoint.disk)",
        )
    )
    if ckpt.s3.uri is not None:
        rows.append(
            (
                "checkpoints: s3",
                f"every {ckpt.s3.every}" if ckpt.s3.every else "end only",
                f"{ckpt.s3.uri.rstrip('/')}/{namespace}, {when(ckpt.s3.every)}, keep "
                f"{ckpt.s3.keep} (checkpoint.s3)",
            )
        )
    rows.append(
        (
            "saving",
            "async",
            f"the loop waits only to copy the state to host memory; a save due while one "
            f"is written: {ckpt.on_busy} (checkpoint.on_busy); SIGTERM: save and exit 75 "
            f"within {show(ckpt.grace_period_s)} s",
        )
    )
    return rows
