"""Entropy control on tiny-arith, side by side: the same GRPO run from the same start with
each of grouprl's entropy controls (docs/entropy.md), one `grouprl train` each.

Per variant: the policy's mean token entropy on the first step and over the last three,
the share of tokens above `algo.entropy_threshold` (`entropy_high_frac`) at the end, the
training reward over the last three steps, and the held-out accuracy after the run.
Saves a PNG of entropy and reward per step (one line per variant) beside the runs. The
last line is the end entropy of the variant that keeps the most, over plain GRPO's.

    .venv/bin/python benchmarks/entropy.py                 # 6 variants x 30 steps, vLLM
    .venv/bin/python benchmarks/entropy.py --smoke         # hf engine, 2 variants x 2 steps
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import dataclass
from pathlib import Path

from machine import TINY_RUN, train_recipe

VARIANTS = {
    "grpo": [],
    "entropy_coef": ["algo.entropy_coef=0.01"],
    "entropy_target": ["algo.entropy_target=0.3"],
    "top_entropy": ["algo.top_entropy_quantile=0.2"],
    "clip_cov": ["algo.policy_loss=clip_cov", "algo.cov_ratio=0.002"],
    "kl_cov": ["algo.policy_loss=kl_cov", "algo.cov_ratio=0.002"],
}
"""Each control with the setting its paper suggests for a small model (the covariance
share at KL-Cov's 7B figure, 2e-3; the adaptive target above this model's entropy)."""

LAST = 3  # steps averaged at the end


@dataclass
class Result:
    name: str
    entropy: list[float]
    high_frac: list[float]
    reward: list[float]
    accuracy_after: float | None

    @property
    def entropy_end(self) -> float:
        tail = self.entropy[-LAST:]
        return sum(tail) / len(tail)

    def row(self) -> str:
        tail = self.reward[-LAST:]
        after = "n/a" if self.accuracy_after is None else f"{self.accuracy_after:.3f}"
        return (
            f"{self.name:<16}{self.entropy[0]:>10.4f}{self.entropy_end:>10.4f}"
            f"{self.high_frac[-1]:>11.4f}{sum(tail) / len(tail):>9.3f}{after:>10}"
        )


def run(name: str, args: argparse.Namespace, work: Path) -> Result:
    """One `grouprl train tiny-arith` with the variant's overrides; its metrics."""
    overrides = [
        *VARIANTS[name],
        f"rollout.engine={args.engine}",
        f"train.steps={args.steps}",
        *args.set,
    ]
    lines, summary = train_recipe(
        "tiny-arith", overrides, run_dir=work / name, log=work / f"{name}.log"
    )
    steps = [m for m in lines if "entropy" in m]
    return Result(
        name,
        entropy=[m["entropy"] for m in steps],
        high_frac=[m["entropy_high_frac"] for m in steps],
        reward=[m["reward/mean"] for m in steps],
        accuracy_after=summary.get("held_out_accuracy_after"),
    )


def plot(results: list[Result], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 7), sharex=True)
    for r in results:
        steps = range(1, len(r.entropy) + 1)
        top.plot(steps, r.entropy, label=r.name)
        bottom.plot(steps, r.reward, label=r.name)
    top.set_ylabel("mean token entropy (nats)")
    bottom.set_ylabel("training reward")
    bottom.set_xlabel("step")
    top.legend(fontsize=8)
    top.set_title("tiny-arith: GRPO with each entropy control")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--engine", default="vllm", choices=["vllm", "hf"])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--set", nargs="*", default=[], help="more overrides for every run")
    parser.add_argument("--out", type=Path, default=None, help="where runs and the PNG go")
    parser.add_argument("--smoke", action="store_true", help=__doc__.splitlines()[-1].strip())
    args = parser.parse_args()
    if args.smoke:
        args.steps, args.engine, args.variants = 2, "hf", ["grpo", "entropy_coef"]
        args.set = [
            *TINY_RUN,
            "rollout.max_tokens=8",
            "data.eval.limit=4",
            *args.set,
        ]
    if "grpo" not in args.variants:
        parser.error("--variants must include grpo: it is the baseline")
    args.variants = ["grpo", *(v for v in args.variants if v != "grpo")]
    work = args.out or Path(tempfile.mkdtemp(prefix="grouprl-entropy-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"tiny-arith, {args.steps} steps per variant, engine {args.engine}; runs in {work}")
    print(f"overrides for every run: {' '.join(args.set) or 'none'}")
    results = []
    for name in args.variants:
        results.append(run(name, args, work))
        print(f"{name}: {' '.join(VARIANTS[name]) or '(the recipe as packaged)'}", flush=True)
    print(
        f"{'variant':<16}{'H first':>10}{'H last 3':>10}{'high_frac':>11}{'reward':>9}"
        f"{'held-out':>10}"
    )
    for r in results:
        print(r.row())
    png = work / "entropy.png"
    plot(results, png)
    print(f"plot: {png}")
    base = results[0]
    best = max(results[1:], key=lambda r: r.entropy_end)
    print(
        f"most entropy kept: {best.entropy_end / base.entropy_end:.2f}x "
        f"({best.name} {best.entropy_end:.4f} vs grpo {base.entropy_end:.4f})"
    )


if __name__ == "__main__":
    main()
