"""The batch and tokens sections of ``grouprl plan``: a step's samples, its mini-batches,
and what one training rank does with its share of each (``workers/rank.py`` cuts every
mini-batch into world-size equal contiguous blocks; a rank runs its block in passes of
``train.micro_batch_size`` samples). No torch.
"""

from __future__ import annotations

from grouprl.config.checks import Derived
from grouprl.config.schema import RunConfig
from grouprl.plan.rows import Row


def batch_rows(cfg: RunConfig, d: Derived) -> list[Row]:
    mini_how = (
        "train.mini_batch_size, over all ranks"
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
        (
            "updates per step",
            str(d.optimizer_steps_per_step),
            f"{iters} pass{'es' if iters > 1 else ''} (algo.num_iterations) x "
            f"{d.samples_per_step} / {d.mini_batch_size} mini-batches",
        ),
        ("training ranks", str(d.world_size), _ranks_how(cfg)),
        *_per_rank_rows(cfg, d),
    ]


def _ranks_how(cfg: RunConfig) -> str:
    c, per_node = cfg.cluster, cfg.ranks_per_node
    if c.workers_per_node is not None:
        source = "cluster.workers_per_node"
    elif c.gpus_per_node:
        kept = f" - rollout.gpus={cfg.rollout.gpus}" if cfg.rollout.gpus else ""
        source = f"one per GPU: cluster.gpus_per_node={c.gpus_per_node}{kept}"
    else:
        source = "one per CPU node"
    return f"cluster.nodes={c.nodes} x {per_node} per node ({source})"


def _per_rank_rows(cfg: RunConfig, d: Derived) -> list[Row]:
    share, world, micro = d.samples_per_rank, d.world_size, d.micro_batch_size
    ranks = f"{world} rank{'s' if world > 1 else ''}"
    rows = [
        (
            "samples per rank per mini-batch",
            str(share),
            f"{d.mini_batch_size} / {ranks}: each rank trains on its contiguous block of "
            "every mini-batch",
        )
    ]
    budget = cfg.train.micro_batch_tokens
    if budget is not None:
        return [
            *rows,
            (
                "micro-batch per rank",
                f"<= {budget:,} tokens",
                "train.micro_batch_tokens: as many of the rank's samples per pass as fit "
                "(train.micro_batch_size is not used)",
            ),
            (
                "gradient accumulation per rank",
                "varies",
                f"the rank's {share} samples in passes of at most {budget:,} tokens, "
                "so it depends on their lengths",
            ),
        ]
    return [
        *rows,
        (
            "micro-batch per rank",
            str(micro),
            "train.micro_batch_size: samples per forward/backward on each rank",
        ),
        (
            "gradient accumulation per rank",
            str(d.grad_accum_per_rank),
            f"{share} / {micro} micro-batches per rank per update",
        ),
    ]


def token_rows(cfg: RunConfig, d: Derived) -> list[Row]:
    per = d.max_tokens_per_sample
    if cfg.env.name == "single_turn":
        why = (
            f"{cfg.data.max_prompt_tokens} prompt (data.max_prompt_tokens) + "
            f"{cfg.rollout.max_tokens} completion (rollout.max_tokens) <= "
            f"{cfg.rollout.max_model_len} (rollout.max_model_len)"
        )
    else:
        why = (
            f"an episode: {cfg.data.max_prompt_tokens} prompt (data.max_prompt_tokens), then up "
            f"to {cfg.env.max_turns} turns (env.max_turns) of {cfg.rollout.max_tokens} tokens "
            "(rollout.max_tokens) with a tool reply after each; it stops (context_overflow) "
            "at rollout.max_model_len"
        )
    budget = cfg.train.micro_batch_tokens
    pass_how = (
        f"{d.micro_batch_size} samples (train.micro_batch_size) x {per}, on each rank"
        if budget is None
        else f"train.micro_batch_tokens={budget:,}, or one {per}-token sample, on each rank"
    )
    return [
        ("max tokens per sample", str(per), why),
        ("max tokens per pass", f"{d.max_tokens_per_pass:,}", pass_how),
        (
            "max tokens per step",
            f"{d.max_tokens_per_step:,}",
            f"{d.samples_per_step} samples x {per}",
        ),
    ]
