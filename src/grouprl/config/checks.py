"""Cross-field checks and the quantities derived from a config.

``check_config`` fails fast, before any model loads, with the arithmetic and valid
choices: the batch arithmetic's (``batch_checks`` pictures one step), the rollout
replicas' (``replica_checks``), settings the run would not read (``ignored_keys``,
``env_keys``), then the rest here. ``derive`` returns the numbers that ``grouprl plan``
prints and the trainer uses, so the two never disagree. No torch here.
"""

from __future__ import annotations

import difflib
import math
import string
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path

from grouprl.assets.datasets import BUILTIN_DATASETS, split_sizes
from grouprl.config.algo_checks import algo_problems
from grouprl.config.batch_checks import batch_problems
from grouprl.config.env_keys import env_key_problems
from grouprl.config.errors import raise_problems, show
from grouprl.config.ignored_keys import ignored_key_problems
from grouprl.config.model_data import DataSource
from grouprl.config.replica_checks import replica_problems
from grouprl.config.run_checks import run_problems
from grouprl.config.schema import RunConfig


@dataclass(frozen=True)
class Derived:
    """Numbers that follow from a valid config. Sizes count samples (completions)."""

    prompts_per_step: int
    samples_per_step: int  # prompts_per_step x rollout.n
    mini_batch_size: int  # samples per optimizer step, over all ranks
    micro_batch_size: int  # samples per forward/backward pass on one rank
    mini_batches_per_step: int  # samples_per_step / mini_batch_size
    samples_per_rank: int  # a rank's share of a mini-batch: mini_batch_size / world_size
    grad_accum_per_rank: int | None
    """Forward/backward passes per rank per optimizer step: ceil(samples_per_rank /
    micro_batch_size); None with train.micro_batch_tokens (it depends on the lengths)."""
    optimizer_steps_per_step: int  # algo.num_iterations x mini_batches_per_step
    train_rows: int | None  # None until a file or hub dataset loads
    eval_rows: int | None  # None if unknown before loading, or no eval split
    steps_per_epoch: float | None  # train_rows / prompts_per_step (batches cross epochs)
    total_steps: int | None  # None: set from train.epochs once the dataset loads
    epochs: float | None  # total_steps x prompts_per_step / train_rows, when both are known
    total_optimizer_steps: int | None
    reference_model: bool  # algo.beta > 0 loads a frozen reference copy (not with LoRA)
    critic_model: bool  # a `critic:` section loads a value model with its own optimizer
    critic_warmup_steps: int  # first steps where only the critic learns
    max_tokens_per_sample: int
    """data.max_prompt_tokens + rollout.max_tokens; a multi-turn episode grows with its
    turns and tool replies up to rollout.max_model_len."""
    max_tokens_per_pass: int
    """Tokens of one forward/backward on one rank: micro_batch_size x max_tokens_per_sample,
    or train.micro_batch_tokens (a longer sample goes alone)."""
    max_tokens_per_step: int
    run_dir: str  # trainer.run_dir with {name} filled in
    world_size: int  # training ranks: cluster.nodes x ranks per node


def config_problems(cfg: RunConfig) -> list[str]:
    """Every cross-field problem of ``cfg``, batch arithmetic first (the memory plan's
    come after these, from ``plan.check_run``)."""
    return [
        *batch_problems(cfg),
        *_check_length(cfg),
        *_check_sampling(cfg),
        *algo_problems(cfg),
        *ignored_key_problems(cfg),
        *env_key_problems(cfg),
        *_check_data(cfg),
        *_check_reward(cfg),
        *_check_trainer(cfg),
        *run_problems(cfg),
        *_check_cluster(cfg),
        *replica_problems(cfg),
    ]


def check_config(cfg: RunConfig) -> None:
    """Raise ``ConfigError`` listing every cross-field problem (``plan.check_run`` adds
    the memory plan's)."""
    raise_problems(config_problems(cfg))


def derive(cfg: RunConfig) -> Derived:
    """Check ``cfg`` (raising ``ConfigError``) and compute the derived quantities."""
    check_config(cfg)
    return derived_numbers(cfg)


def derived_numbers(cfg: RunConfig) -> Derived:
    """The derived quantities of a config that passes ``config_problems``."""
    prompts = cfg.data.batch_size
    samples = prompts * cfg.rollout.n
    mini = cfg.train.mini_batch_size or samples
    micro, budget = cfg.train.micro_batch_size, cfg.train.micro_batch_tokens
    per_step = cfg.algo.num_iterations * (samples // mini)
    share = mini // cfg.world_size  # Rank.block: equal contiguous blocks of each mini-batch
    train_rows = split_rows(cfg.data.train)
    eval_rows = split_rows(cfg.data.eval) if cfg.data.eval is not None else None
    steps_per_epoch = train_rows / prompts if train_rows is not None else None
    total_steps = cfg.train.steps
    epochs_set = cfg.train.epochs  # exactly one of train.steps and train.epochs is set
    if total_steps is None and train_rows is not None and epochs_set is not None:
        total_steps = steps_for_epochs(epochs=epochs_set, rows=train_rows, batch_size=prompts)
    epochs = None
    if total_steps is not None and train_rows:
        epochs = cfg.train.epochs or total_steps * prompts / train_rows
    sample_tokens = cfg.data.max_prompt_tokens + cfg.rollout.max_tokens
    if cfg.env.name != "single_turn":
        sample_tokens = cfg.rollout.max_model_len
    return Derived(
        prompts_per_step=prompts,
        samples_per_step=samples,
        mini_batch_size=mini,
        micro_batch_size=micro,
        mini_batches_per_step=samples // mini,
        samples_per_rank=share,
        # MicroBatching.ranges: passes of micro samples (a shorter last one, were the
        # share not a multiple of micro; batch_checks holds it to one)
        grad_accum_per_rank=math.ceil(share / micro) if budget is None else None,
        optimizer_steps_per_step=per_step,
        train_rows=train_rows,
        eval_rows=eval_rows,
        steps_per_epoch=steps_per_epoch,
        total_steps=total_steps,
        epochs=epochs,
        total_optimizer_steps=total_steps * per_step if total_steps is not None else None,
        reference_model=cfg.algo.beta > 0 and not cfg.train.lora.rank,  # LoRA: adapters off
        critic_model=cfg.critic is not None,
        critic_warmup_steps=cfg.critic.warmup_steps if cfg.critic is not None else 0,
        max_tokens_per_sample=sample_tokens,
        max_tokens_per_pass=(
            micro * sample_tokens
            if budget is None
            else max(budget, sample_tokens)  # a longer sample goes alone
        ),
        max_tokens_per_step=samples * sample_tokens,
        run_dir=cfg.trainer.run_dir.replace("{name}", cfg.name),
        world_size=cfg.world_size,
    )


def steps_for_epochs(*, epochs: float, rows: int, batch_size: int) -> int:
    """Training steps for ``epochs`` passes over ``rows`` prompts, rounded up.

    Matches ``data.sampler.PromptSampler``: batches run across epoch boundaries, so no
    row is dropped and an epoch is ``rows / batch_size`` steps.
    """
    return max(1, math.ceil(epochs * rows / batch_size))


def split_rows(source: DataSource) -> int | None:
    """Rows in a split when known without loading it (built-in datasets), else None."""
    if not isinstance(source.source, str) or source.source not in BUILTIN_DATASETS:
        return None
    rows = split_sizes(source.source).get(source.split)
    if rows is None:
        return None
    return min(rows, source.limit) if source.limit is not None else rows


# --- the individual checks; each returns messages ---------------------------


def _check_length(cfg: RunConfig) -> list[str]:
    steps, epochs = cfg.train.steps, cfg.train.epochs
    problems = []
    if steps is None and epochs is None:
        problems.append(
            "the run length is not set: set train.steps=N (training steps) or "
            "train.epochs=E (passes over the training prompts)."
        )
    if steps is not None and epochs is not None:
        problems.append(
            f"train.steps={steps} and train.epochs={show(epochs)} are both set; keep one "
            "(override train.epochs=null or train.steps=null)."
        )
    needed = cfg.data.max_prompt_tokens + cfg.rollout.max_tokens
    if needed > cfg.rollout.max_model_len:
        problems.append(
            f"data.max_prompt_tokens={cfg.data.max_prompt_tokens} + rollout.max_tokens="
            f"{cfg.rollout.max_tokens} = {needed} exceeds rollout.max_model_len="
            f"{cfg.rollout.max_model_len}; set rollout.max_model_len={needed} or more, or "
            "lower one of the other two."
        )
    return problems


GREEDY_BELOW = 1e-5
"""Temperatures below this decode greedily (vLLM's threshold; ``SamplingSettings``)."""


def _check_sampling(cfg: RunConfig) -> list[str]:
    """Training samples at ``rollout.temperature`` and scores tokens at logits / T
    (``workers/logprobs.py``): greedy decoding can do neither. Held-out evaluation has
    its own ``rollout.eval_temperature``, where 0 (greedy) is the default."""
    t = cfg.rollout.temperature
    if t >= GREEDY_BELOW:
        return []
    return [
        f"rollout.temperature={show(t)} decodes greedily: every sample of a prompt would be "
        "the same (no group has a learning signal) and the trainer scores tokens at "
        "logits / rollout.temperature. Training needs sampling: set rollout.temperature=1.0 "
        f"(the model as it is) or another value of at least {GREEDY_BELOW:g}, such as 0.7. "
        "Greedy held-out scores come from rollout.eval_temperature=0 (the default)."
    ]


def _check_data(cfg: RunConfig) -> list[str]:
    problems = []
    sources = [("data.train", cfg.data.train), ("data.eval", cfg.data.eval)]
    for key, source in sources:
        if source is None or not isinstance(source.source, str):
            continue
        if not source.source.startswith("builtin:"):
            continue
        if source.source not in BUILTIN_DATASETS:
            problems.append(
                f"{key}.source={show(source.source)} is not a built-in dataset; choose one of "
                f"{', '.join(BUILTIN_DATASETS)}, a .jsonl/.json/.parquet file, or a hub name."
            )
        elif source.split not in (sizes := split_sizes(source.source)):
            problems.append(
                f"{key}.split={show(source.split)}: {source.source} has the splits "
                f"{', '.join(sizes)}; set {key}.split to one of them."
            )
    train, held = cfg.data.train, cfg.data.eval
    rows = attrgetter("source", "split", "subset", "seed", "size")  # seed, size: reasoning_gym
    if held is not None and rows(held) == rows(train):
        problems.append(
            f"data.eval reads the same rows as data.train ({train.label}, split "
            f"{show(train.split)}), so validation would measure memorisation; set "
            "data.eval.split (e.g. test), another data.eval.source, or data.eval=null."
        )
    return problems


def close_function(correct: str | None, names: list[str]) -> str | None:
    """The listed function name ``reward.correct_function`` is a typo away from, if any.
    One of the two is misspelt, and only the reward registry knows which: the check of the
    run's inputs says (``driver/preflight.py``), so the unknown function is named first
    and never offered as the fix."""
    if correct is None or correct in names:
        return None
    close = difflib.get_close_matches(correct, names, n=1, cutoff=0.8)
    return close[0] if close else None


def _check_reward(cfg: RunConfig) -> list[str]:
    names = [f.name for f in cfg.reward.functions]
    if not names:
        return [
            "reward.functions is empty, so every reward is 0; add one, e.g. "
            "reward.functions=[{name: math_answer}]."
        ]
    correct = cfg.reward.correct_function
    if correct is not None and correct not in names and close_function(correct, names) is None:
        return [
            f"reward.correct_function={show(correct)} is not one of the reward.functions "
            f"({', '.join(names)}). It names the function whose score of 1.0 counts as a "
            "correct answer, for the `accuracy` metrics (the reward is unaffected). Fix: "
            "set reward.correct_function to the one of your functions that scores 1.0 for "
            "a correct answer and less otherwise (e.g. "
            f"reward.correct_function={names[0]}), or reward.correct_function=null (no "
            "accuracy is logged; docs/rewards.md)."
        ]
    return []


def shares_training_gpu(cfg: RunConfig, *, training_on_gpu: bool) -> bool:
    """Whether the engines run on the GPUs the policy trains on (in the driver, or in
    actors colocated with the ranks): they sleep while it trains."""
    return training_on_gpu and cfg.rollout.gpus == 0 and cfg.rollout.engine != "server"


def staleness_layout_problems(cfg: RunConfig, *, training_on_gpu: bool) -> list[str]:
    """``rollout.max_staleness`` needs engines that generate while the policy trains."""
    if not (
        cfg.rollout.max_staleness and shares_training_gpu(cfg, training_on_gpu=training_on_gpu)
    ):
        return []
    return [
        f"rollout.max_staleness={cfg.rollout.max_staleness} generates while the policy "
        "trains, but the engine shares the training GPU (it sleeps while training). Give "
        "it GPUs of its own (rollout.gpus=1 with cluster.gpus_per_node, or "
        "rollout.engine=server), or set rollout.max_staleness=0."
    ]


def _check_cluster(cfg: RunConfig) -> list[str]:
    c = cfg.cluster
    # train.device=auto finds out at run time (driver/run.py checks again there)
    on_gpu = cfg.train.device == "cuda" or (cfg.train.device == "auto" and c.gpus_per_node > 0)
    problems = staleness_layout_problems(cfg, training_on_gpu=on_gpu)
    if cfg.rollout.gpus and not c.gpus_per_node:
        problems.append(
            f"rollout.gpus={cfg.rollout.gpus} keeps GPUs for generation, but the nodes have "
            "none (cluster.gpus_per_node=0); set cluster.gpus_per_node, or rollout.gpus=0 "
            "(rollout.placement=actor runs the engine in a CPU process of its own)."
        )
    if c.gpus_per_node and cfg.train.device == "cpu":
        problems.append(
            f"cluster.gpus_per_node={c.gpus_per_node} but train.device=cpu; set "
            "train.device=auto (or cuda) to train on the GPUs, or cluster.gpus_per_node=0."
        )
    if c.offload_optimizer and c.offload:
        problems.append(
            "cluster.offload_optimizer=true and cluster.offload=true: the full offload already "
            "keeps the optimizer states in CPU memory, with the parameters and gradients. Set "
            "one of them: cluster.offload_optimizer to keep parameters on the GPUs, "
            "cluster.offload to move everything."
        )
    if c.offload_optimizer and cfg.train.device == "cpu":
        problems.append(
            "cluster.offload_optimizer=true moves optimizer states off the GPUs, but "
            "train.device=cpu trains on the CPU, where they already are; remove "
            "cluster.offload_optimizer, or train on GPUs (train.device=auto or cuda)."
        )
    training_gpus = c.gpus_per_node - cfg.rollout.gpus  # rollout.gpus >= it: replica_checks
    if c.workers_per_node and training_gpus > 0 and c.workers_per_node > training_gpus:
        kept = f" - rollout.gpus={cfg.rollout.gpus}" if cfg.rollout.gpus else ""
        problems.append(
            f"cluster.workers_per_node={c.workers_per_node} is more than the {training_gpus} "
            f"training GPUs per node (cluster.gpus_per_node={c.gpus_per_node}{kept}): each "
            f"GPU worker needs its own GPU. Set cluster.workers_per_node to at most "
            f"{training_gpus}, or null (one worker per GPU)."
        )
    return problems


def _check_trainer(cfg: RunConfig) -> list[str]:
    problems = []
    resume = cfg.trainer.resume
    if resume not in ("never", "auto") and not Path(resume).expanduser().exists():
        problems.append(
            f"trainer.resume={show(resume)} is neither `never`, `auto` nor an existing "
            "checkpoint path; fix the path or use trainer.resume=auto (latest checkpoint in "
            "the run directory)."
        )
    try:
        parsed = list(string.Formatter().parse(cfg.trainer.run_dir))
    except ValueError:  # an unmatched brace
        parsed = [("", "?", "", None)]
    unknown = [f for _, f, _, _ in parsed if f is not None and f != "name"]
    if unknown:
        problems.append(
            f"trainer.run_dir={show(cfg.trainer.run_dir)} has a placeholder other than "
            "{name} (the run name), the only one filled in; fix the braces."
        )
    return problems
