"""Achieved FLOP/s of grouprl's training step against a dense float32 matmul on the same
machine, in the same run, with the same thread count.

    models.build_model(--model) ─► TrainingBatch: --rows rows of up to --tokens-per-row
          │                        (a quarter prompt, the rest completion; lengths drawn
          │                        between --min-fill and 1 of the row, seeded)
          ▼
    train.update.policy_update: TokenScorer, AdamW      torch.mm of two square float32
    (train.optim.make_optimizer), one optimizer         matrices sized to ~0.2 s each
    step over the batch (GRPO loss, micro-batches)      (before and after the steps)
          │ seconds per step (median)                          │ GFLOP/s (median)
          │ FLOPs: analytic, and FlopCounterMode on one step   │
          └────────────────────────► report ◄──────────────────┘
            last line: training step vs dense matmul: NN% of the matmul rate

Suffixes: B rows, T tokens of a row, d hidden, V vocab, L layers.

FLOPs of one step, counted analytically over the real (unpadded) tokens, the
convention of model-FLOPs utilization:

    6 x N x tokens                N: non-embedding matmul weights, L x (q, k, v, o, gate,
                                  up, down); forward 2N per token, backward 4N
  + 6 x V x d x scored tokens     the LM head runs only where a token is scored (the
                                  completion; TokenScorer's score mask)
  + 6 x T_b^2 x d per row b and layer    causal attention: QK^T and AV are 4 T^2 d in
                                  the forward, half of it under the causal mask; the
                                  backward is twice the forward

What the kernels execute is more: padding (unless --packing: each micro-batch is trimmed
to its longest row), the full T^2 of attention (sdpa computes the masked half too) with
QK^T again in its backward (the CPU flash kernel recomputes it): 14 x T^2 x d per row and
layer, and the LM head's forward again in the backward (TokenScorer checkpoints its
chunks): 8 x V x d per scored token. That "executed" count is printed beside the count of
``torch.utils.flop_counter.FlopCounterMode`` over one step (matmuls and attention; the
CPU sdpa kernels are given its sdpa formulas). The ratio on the last line uses the model
FLOPs (useful work) per second against the matmul's 2 n^3 per second. Run it from the
repo root:

    .venv/bin/python benchmarks/train_flops.py [--model tiny|25m|0.5b --rows 32 ...]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass

from machine import add_smoke, machine_lines, pin_threads
from models import SIZES, build_model, parameter_count

MATMUL_TARGET_S = 0.2
MATMUL_REPEATS = 3
"""Timed matmuls before the steps and again after them."""
TFLOP, GFLOP = 1e12, 1e9


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=SIZES, default="tiny", help="a size from models.py")
    p.add_argument("--rows", type=int, default=32, help="samples in the batch")
    p.add_argument("--tokens-per-row", type=int, default=128, help="longest row, all told")
    p.add_argument(
        "--min-fill",
        type=float,
        default=0.5,
        help="shortest row as a fraction of --tokens-per-row (1: every row full)",
    )
    p.add_argument("--micro-batch", type=int, default=32, help="rows per forward/backward")
    p.add_argument("--packing", action="store_true", help="train.packing: padding-free passes")
    p.add_argument("--steps", type=int, default=3, help="timed optimizer steps")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads")
    p.add_argument("--profile", action="store_true", help="top ops of one more step, to stderr")
    p.add_argument(
        "--matmul-s", type=float, default=MATMUL_TARGET_S, help="seconds of one baseline matmul"
    )
    add_smoke(p, rows=4, tokens_per_row=32, micro_batch=2, steps=1, threads=1, matmul_s=0.02)
    args = p.parse_args()
    if args.rows < 1 or args.steps < 1 or args.threads < 1 or args.micro_batch < 1:
        p.error("need --rows, --steps, --threads, --micro-batch >= 1")
    if args.tokens_per_row < 8 or not 0 < args.min_fill <= 1:
        p.error("need --tokens-per-row >= 8 and 0 < --min-fill <= 1")
    return args


def log(message: str) -> None:
    print(f"[train_flops] {message}", file=sys.stderr, flush=True)


# --- the batch and the step ------------------------------------------------------------------


def make_batch(args, *, vocab: int):
    """``--rows`` trajectories: a prompt of a quarter row, a completion filling the row to
    a seeded length in [min_fill, 1] x tokens_per_row; advantages +-1 by row."""
    import torch

    from grouprl.driver.batch import build_batch
    from grouprl.types import Completion, Trajectory, Turn

    g = torch.Generator().manual_seed(0)
    T = args.tokens_per_row
    prompt_len = T // 4
    shortest = max(prompt_len + 1, math.ceil(args.min_fill * T))
    trajectories = []
    for i in range(args.rows):
        length = int(torch.randint(shortest, T + 1, (1,), generator=g))
        ids = torch.randint(3, vocab, (length,), generator=g).tolist()
        completion = Completion(
            token_ids=ids[prompt_len:],
            logprobs=[-1.0] * (length - prompt_len),
            finish_reason="length",
        )
        turns = [Turn(completion)]
        trajectories.append(
            Trajectory(prompt_index=i, prompt_ids=ids[:prompt_len], turns=turns, weight_version=0)
        )
    batch = build_batch(trajectories, pad_id=0)
    advantages_B = torch.tensor([1.0 if i % 2 else -1.0 for i in range(args.rows)])
    batch.advantages_BT = advantages_B[:, None] * batch.loss_mask_BT
    return batch


def train_config(args):
    from grouprl.config.train import TrainConfig

    return TrainConfig(
        lr=1e-6,
        micro_batch_size=args.micro_batch,
        # with packing, a pass holds as many real tokens as micro_batch full rows
        micro_batch_tokens=args.micro_batch * args.tokens_per_row if args.packing else None,
        packing=args.packing,
    )


@dataclass
class Trainer:
    """The policy's pieces as ``roles.policy.PolicyWorker`` holds them (one process)."""

    model: object
    scorer: object
    optimizer: object
    train: object
    algo: object

    @classmethod
    def of(cls, model, args) -> Trainer:
        from grouprl.config.algo_section import AlgoConfig
        from grouprl.workers.logprobs import TokenScorer
        from grouprl.workers.optim import make_optimizer

        train = train_config(args)
        scorer = TokenScorer(model, chunk_tokens=train.logprob_chunk_tokens, packed=train.packing)
        return cls(model, scorer, make_optimizer(model, train), train, AlgoConfig())

    def step(self, batch) -> dict[str, float]:
        from grouprl.workers.update import policy_update

        self.scorer.train()
        return policy_update(
            scorer=self.scorer,
            optimizer=self.optimizer,
            batch=batch,
            algo=self.algo,
            train=self.train,
            mini_batch_size=len(batch),
        )


# --- FLOPs ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Flops:
    matmul: float
    head: float
    attention: float

    @property
    def total(self) -> float:
        return self.matmul + self.head + self.attention


def analytic_flops(model, batch, train) -> tuple[Flops, Flops]:
    """(model FLOPs over real tokens, FLOPs as executed) of one step; see the docstring."""
    from grouprl.metrics.telemetry import ModelShape, pass_flops
    from grouprl.workers.update import MicroBatching

    shape = ModelShape.of(model)
    d, V, L, N = shape.hidden, shape.vocab, shape.layers, shape.matmul_weights
    lengths = batch.attention_mask_BT.sum(dim=1).tolist()
    counted = pass_flops(shape, batch.attention_mask_BT, batch.loss_mask_BT)
    model_flops = Flops(counted.weights, counted.head, counted.attention)
    scored = counted.head / (6 * V * d)
    tokens, square_run = sum(lengths), float(sum(n * n for n in lengths))
    if not train.packing:  # each micro-batch is trimmed to its longest row, then padded
        tokens, square_run = 0, 0.0
        for rows in MicroBatching.of(train).ranges(batch.attention_mask_BT):
            width = max(lengths[rows.start : rows.stop])
            tokens += len(rows) * width
            square_run += len(rows) * width * width
    executed = Flops(6 * N * tokens, 8 * V * d * scored, 14 * square_run * d * L)
    return model_flops, executed


def counted_flops(trainer: Trainer, batch) -> tuple[int, dict[str, int]]:
    """FlopCounterMode over one step: total and per op."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

    aten = torch.ops.aten

    def cpu_sdpa(query, key, value, *args, out_shape=None, **kwargs) -> int:
        return sdpa_flop_count(query, key, value)

    def cpu_sdpa_backward(grad_out, query, key, value, *args, out_shape=None, **kwargs) -> int:
        return sdpa_backward_flop_count(grad_out, query, key, value)

    mapping = {
        aten._scaled_dot_product_flash_attention_for_cpu: cpu_sdpa,
        aten._scaled_dot_product_flash_attention_for_cpu_backward: cpu_sdpa_backward,
    }
    counter = FlopCounterMode(display=False, custom_mapping=mapping)
    with counter:
        trainer.step(batch)
    counts = counter.get_flop_counts()["Global"]
    by_op = {str(op).removeprefix("aten."): n for op, n in counts.items()}
    return counter.get_total_flops(), by_op


# --- the matmul baseline and the profile ------------------------------------------------------


def matmul_size(target_s: float) -> int:
    """The side n of square float32 matrices whose torch.mm takes about ``target_s``."""
    import torch

    n, seconds = 256, 0.0
    while seconds < target_s / 8:
        n *= 2
        a, b = torch.randn(n, n), torch.randn(n, n)
        torch.mm(a, b)  # first call allocates
        started = time.perf_counter()
        torch.mm(a, b)
        seconds = time.perf_counter() - started
    scaled = n * (target_s / seconds) ** (1 / 3)
    return max(64, round(scaled / 64) * 64)


def matmul_seconds(n: int, repeats: int) -> list[float]:
    import torch

    a, b = torch.randn(n, n), torch.randn(n, n)
    out = torch.mm(a, b)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        torch.mm(a, b, out=out)
        times.append(time.perf_counter() - started)
    return times


def profile_step(trainer: Trainer, batch) -> None:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        trainer.step(batch)
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25)
    print(f"[train_flops] one step, top ops by self CPU time:\n{table}", file=sys.stderr)


# --- report ----------------------------------------------------------------------------------


def main() -> None:
    args = parse_args()
    load_at_start = os.getloadavg()[0]
    pin_threads(args.threads)
    log(f"building the {args.model} model")
    model = build_model(args.model)
    trainer = Trainer.of(model, args)
    batch = make_batch(args, vocab=model.config.vocab_size)
    model_flops, executed = analytic_flops(model, batch, trainer.train)

    n = matmul_size(args.matmul_s)
    mm_times = matmul_seconds(n, MATMUL_REPEATS)
    log(f"matmul {n}x{n}: " + ", ".join(f"{t:.3f} s" for t in mm_times))
    counted, by_op = counted_flops(trainer, batch)  # also the untimed first step
    log("FlopCounterMode step: " + ", ".join(f"{op} {f / TFLOP:.4f}" for op, f in by_op.items()))
    step_s = []
    for i in range(args.steps):
        started = time.perf_counter()
        metrics = trainer.step(batch)
        step_s.append(time.perf_counter() - started)
        log(f"step {i + 1}: {step_s[-1]:.3f} s, loss {metrics['loss']:.4f}")
    if args.profile:
        profile_step(trainer, batch)
    after = matmul_seconds(n, MATMUL_REPEATS)
    log(f"matmul {n}x{n} after the steps: " + ", ".join(f"{t:.3f} s" for t in after))
    mm_times += after
    report(
        args,
        model=model,
        batch=batch,
        flops=(model_flops, executed, counted),
        step_s=step_s,
        matmul=(n, mm_times),
        load=load_at_start,
    )


def report(args, *, model, batch, flops, step_s, matmul, load) -> None:
    from grouprl.metrics.telemetry import ModelShape

    model_flops, executed, counted = flops
    n, mm_times = matmul
    med = statistics.median
    cfg = model.config
    real = int(batch.attention_mask_BT.sum())
    print("\n".join(machine_lines(threads=args.threads, load=load)))
    print(
        f"model: {args.model} ({parameter_count(model):,} parameters, float32; "
        f"{ModelShape.of(model).matmul_weights:,} non-embedding matmul weights; "
        f"d {cfg.hidden_size}, "
        f"{cfg.num_hidden_layers} layers, vocab {cfg.vocab_size})"
    )
    width = batch.input_ids_BT.shape[1]
    scored = int(batch.loss_mask_BT.sum())
    print(
        f"batch: {len(batch)} rows x up to {width} tokens = {real} real tokens "
        f"({real / (len(batch) * width):.0%} of the padded rows), {scored} scored; "
        f"micro-batch {args.micro_batch} rows, packing {'on' if args.packing else 'off'}, "
        "one AdamW step (GRPO loss)"
    )
    print(
        f"TFLOP per step: model {model_flops.total / TFLOP:.4f} (matmuls "
        f"{model_flops.matmul / TFLOP:.4f}, head {model_flops.head / TFLOP:.4f}, attention "
        f"{model_flops.attention / TFLOP:.4f}); executed (analytic) "
        f"{executed.total / TFLOP:.4f}; FlopCounterMode {counted / TFLOP:.4f}"
    )
    step = med(step_s)
    mm_s = med(mm_times)
    mm_rate = 2 * n**3 / mm_s
    rate = model_flops.total / step
    print(
        f"training step: {step:.3f} s (median of {len(step_s)}; min {min(step_s):.3f}), "
        f"{rate / GFLOP:.1f} GFLOP/s of model FLOPs, {counted / step / GFLOP:.1f} GFLOP/s "
        "counted"
    )
    print(
        f"dense matmul: {n} x {n} float32, {mm_s:.3f} s (median of {len(mm_times)}), "
        f"{mm_rate / GFLOP:.1f} GFLOP/s"
    )
    print(f"training step vs dense matmul: {rate / mm_rate:.0%} of the matmul rate")


if __name__ == "__main__":
    main()
