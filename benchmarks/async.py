"""Seconds per GRPO step, synchronous against asynchronous (``rollout.max_staleness``), with
the rollout engine and the trainer on different cores of a 2-node Ray cluster here.

    2-node Ray cluster (tests/ray_cluster.py, 1 CPU per node), each `ray start` bound to
    one core, so every process a node starts stays on its core:
      head  (core 0): the driver `grouprl train`, also the training rank (world size 1)
      node1 (core 1): the rollout engine actor (rollout.placement=actor; its vLLM threads
                      bound to core 1)
    run "sync":  rollout.max_staleness=0   generate ─► train ─► push, in turn
    run "async": rollout.max_staleness=S   the next batches generate while this one trains
    the same recipe, seed, steps and samples per step; both validate before and after
    last line: async speedup: N.NNx   (sync seconds per step / async seconds per step)

A step's seconds are the wall time between the metrics records of steps 2 and N-1 over
N-3 steps: the first step generates synchronously in both runs (and warms up), and the
last one's record waits for the final validation. The driver is pinned with
``sched_setaffinity`` before it starts (its children inherit it), torch uses one thread on
each side, and a monitor thread reads every process's and thread's allowed cores and CPU
time from /proc while the runs go, so the report shows the pinning held. The expected
overlap: a synchronous step is G + T + push, an asynchronous one about max(G, T) + push.
Run it from the repo root with nothing else busy:

    .venv/bin/python benchmarks/async.py [--staleness 2 --steps 60 ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from machine import add_smoke, machine_lines

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

TRAINER_CORE, ENGINE_CORE = 0, 1
"""The head node (and the driver, which trains) on core 0; node1 (the engine) on core 1."""
TRAINER_NODE, ENGINE_NODE = "head node (trainer's)", "node1 (engine's)"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--staleness", type=int, default=2, help="rollout.max_staleness of the async run"
    )
    p.add_argument("--steps", type=int, default=60, help="training steps per run")
    p.add_argument("--prompts", type=int, default=4, help="prompts per step (data.batch_size)")
    p.add_argument("--group", type=int, default=8, help="samples per prompt (rollout.n)")
    p.add_argument("--max-tokens", type=int, default=64, help="rollout.max_tokens")
    p.add_argument("--updates", type=int, default=1, help="optimizer updates per step")
    p.add_argument("--eval-limit", type=int, default=200, help="held-out prompts")
    p.add_argument("--train-limit", type=int, help="train rows to load (default: all 20,000)")
    p.add_argument("--engine", choices=["vllm", "hf"], default="vllm", help="rollout.engine")
    p.add_argument("--only", choices=["sync", "async"], help="run one side")
    p.add_argument("--set", action="append", default=[], help="more overrides, both runs")
    p.add_argument("--address", help="a running 2-node Ray cluster's HOST:PORT (not pinned)")
    p.add_argument(
        "--nice",
        type=int,
        default=0,
        help="niceness of every process it starts (below 0 needs root): on a machine shared "
        "with other jobs, -20 gives the two runs their cores",
    )
    add_smoke(
        p, steps=4, prompts=2, group=2, max_tokens=4, eval_limit=4, train_limit=64, engine="hf"
    )
    return p.parse_args()


# --- pinning: start the nodes on their cores, and watch every process's cores -----------


def start_pinned_cluster(*, nice: int):
    """A 2-node cluster, node k's `ray start` (and so all it starts) bound to core k at
    niceness ``nice``; each node's vLLM binds its threads to that core too
    (VLLM_CPU_OMP_THREADS_BIND)."""
    from ray_cluster import LocalRayCluster

    class PinnedCluster(LocalRayCluster):
        def _start(self, args: list[str], name: str) -> None:
            core = len(self.procs)  # head first: core 0, then node1: core 1
            mask, bind = os.sched_getaffinity(0), os.environ.get("VLLM_CPU_OMP_THREADS_BIND")
            niceness = os.getpriority(os.PRIO_PROCESS, 0)
            os.sched_setaffinity(0, {core})  # a child inherits its parent's mask at fork
            os.setpriority(os.PRIO_PROCESS, 0, nice)  # and its niceness
            os.environ["VLLM_CPU_OMP_THREADS_BIND"] = str(core)
            try:
                super()._start(args, name)
            finally:
                os.sched_setaffinity(0, mask)
                os.setpriority(os.PRIO_PROCESS, 0, niceness)
                if bind is None:
                    os.environ.pop("VLLM_CPU_OMP_THREADS_BIND")
                else:
                    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = bind

    return PinnedCluster(nodes=2, cpus_per_node=1).start()


@dataclass
class Seen:
    """One process as the monitor saw it: the cores its threads may use, its CPU time."""

    group: str  # the root it descends from: a Ray node, or a run's driver
    command: str = ""
    cores: set[int] = field(default_factory=set)
    first_cpu_s: float | None = None  # at the first sample: the run's share is the rest
    cpu_s: float = 0.0


def _cores(status: Path) -> set[int]:
    for line in status.read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            out: set[int] = set()
            for part in line.split(":", 1)[1].strip().split(","):
                lo, _, hi = part.partition("-")
                out.update(range(int(lo), int(hi or lo) + 1))
            return out
    return set()


class Monitor:
    """Samples, every ``every`` seconds, the processes under ``roots`` (and their threads):
    allowed cores (the union over threads and samples) and the CPU seconds each used
    while watched."""

    TICK = os.sysconf("SC_CLK_TCK")

    def __init__(self, roots: dict[int, str], *, every: float = 1.0) -> None:
        self.roots, self.every = roots, every
        self.seen: dict[int, Seen] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="pin-monitor")

    def __enter__(self) -> Monitor:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.sample()

    def sample(self) -> None:
        parents: dict[int, int] = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
                parents[int(stat.parent.name)] = int(fields[1])
            except (OSError, IndexError, ValueError):
                continue  # the process ended while read
        for pid in parents:
            root = self._root(pid, parents)
            if root is not None:
                self._read(pid, root)

    def _root(self, pid: int, parents: dict[int, int]) -> int | None:
        while pid > 1:
            if pid in self.roots:
                return pid
            pid = parents.get(pid, 0)
        return None

    def _read(self, pid: int, root: int) -> None:
        proc = Path(f"/proc/{pid}")
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            cores = set().union(*(_cores(t / "status") for t in (proc / "task").iterdir()))
        except (OSError, ValueError):
            return  # the process ended while read
        seen = self.seen.setdefault(pid, Seen(self.roots[root]))
        seen.command = cmd[:60]  # Ray retitles a worker (ray::RolloutHost) once it runs
        seen.cores |= cores
        total = (int(fields[11]) + int(fields[12])) / self.TICK
        seen.first_cpu_s = total if seen.first_cpu_s is None else seen.first_cpu_s
        seen.cpu_s = total - seen.first_cpu_s

    def groups_of(self, needle: str) -> set[str]:
        """The roots under which a process whose command holds ``needle`` ran."""
        return {s.group for s in self.seen.values() if needle in s.command}

    def lines(self) -> list[str]:
        """Per root: its processes, the cores any of their threads were allowed, their CPU
        seconds, and the busiest process."""
        out = []
        for group in dict.fromkeys(self.roots.values()):
            procs = {pid: s for pid, s in self.seen.items() if s.group == group}
            if not procs:
                continue
            cores = sorted(set().union(*(s.cores for s in procs.values())))
            pid, top = max(procs.items(), key=lambda kv: kv[1].cpu_s)
            out.append(
                f"  {group}: {len(procs)} processes on cores {cores}, "
                f"{sum(s.cpu_s for s in procs.values()):.1f} CPU-s; busiest pid {pid} "
                f"({top.cpu_s:.1f} CPU-s) {top.command}"
            )
        return out


# --- one run -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Result:
    name: str
    staleness: int
    step_s: float  # wall seconds per step, steps 2 .. N-1
    records: list[dict]
    summary: dict
    monitor: list[str]

    def mean(self, key: str) -> float | None:
        values = [r[key] for r in self.records[1:] if r.get(key) is not None]
        return statistics.fmean(values) if values else None

    def line(self) -> str:
        parts = [f"{self.name:5s} (max_staleness={self.staleness}): {self.step_s:6.3f} s/step"]
        for label, key in [
            ("generate", "time/generate_s"),
            ("train", "time/train_s"),
            ("push", "time/weight_sync_s"),
            ("wait for rollout", "time/wait_rollout_s"),
            ("wait for batch", "time/wait_generate_s"),
            ("admission wait", "stream/admission_wait_s"),
            ("staleness", "staleness"),
        ]:
            value = self.mean(key)
            if value is not None:
                parts.append(f"{label} {value:.3f}" + ("" if label == "staleness" else " s"))
        accuracy = self.summary.get("held_out_accuracy_after")
        before = self.summary.get("held_out_accuracy_before")
        parts.append(f"held-out accuracy {_acc(before)} -> {_acc(accuracy)}")
        return ", ".join(parts)


def _acc(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def overrides(args, *, address: str, staleness: int, run_dir: Path) -> list[str]:
    """Both runs' config: the tiny-arith recipe on one thread, engine in a Ray actor."""
    out = [
        f"cluster.address={address}",
        "rollout.placement=actor",
        f"rollout.engine={args.engine}",
        f"rollout.n={args.group}",
        f"rollout.max_tokens={args.max_tokens}",
        f"rollout.max_staleness={staleness}",
        f"data.batch_size={args.prompts}",
        f"data.eval.limit={args.eval_limit}",
        f"train.steps={args.steps}",
        f"train.mini_batch_size={args.prompts * args.group // args.updates}",
        f"train.micro_batch_size={min(32, args.prompts * args.group // args.updates)}",
        "train.num_threads=1",
        "trainer.eval_every=null",  # before and after only: validation is not step time
        "metrics.progress=false",
        "metrics.tensorboard=false",
        f"trainer.run_dir={run_dir}",
    ]
    if args.train_limit is not None:
        out.append(f"data.train.limit={args.train_limit}")
    return out + list(args.set)


def _pin(core: int, *, nice: int) -> None:
    """In the driver's child before it runs: one core, the benchmark's niceness."""
    os.sched_setaffinity(0, {core})
    os.setpriority(os.PRIO_PROCESS, 0, nice)


def run_one(name: str, args, *, address: str, staleness: int, work: Path, pinned: bool, roots):
    """One `grouprl train` in a subprocess (bound to the trainer's core when ``pinned``)."""
    run_dir = work / name
    cmd = [sys.executable, "-m", "grouprl", "train", "tiny-arith"]
    cmd += overrides(args, address=address, staleness=staleness, run_dir=run_dir)
    env = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    log = work / f"{name}.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            preexec_fn=(lambda: _pin(TRAINER_CORE, nice=args.nice)) if pinned else None,
        )
        try:
            with Monitor({**roots, proc.pid: f"{name} run's driver (trains)"}) as monitor:
                proc.wait()
        finally:
            if proc.poll() is None:  # interrupted: the run goes with the benchmark
                proc.terminate()
                proc.wait(timeout=60)
    if proc.returncode != 0:
        raise SystemExit(f"the {name} run exited {proc.returncode}:\n{log.read_text()[-4000:]}")
    records = list(map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()))
    steps = {r["step"]: r for r in records if "time/step_s" in r}
    ordered = [steps[s] for s in sorted(steps)]
    middle = ordered[1:-1] if len(ordered) >= 4 else ordered
    step_s = (middle[-1]["wall_time"] - middle[0]["wall_time"]) / max(1, len(middle) - 1)
    if len(ordered) < 4:  # too few steps for the wall time: the loop's own figure
        step_s = statistics.median(r["time/step_s"] for r in ordered)
    summary = json.loads((run_dir / "summary.json").read_text())
    lines = monitor.lines()
    engine_on = monitor.groups_of("RolloutHost")
    if pinned and engine_on != {ENGINE_NODE}:
        lines.append(
            f"  WARNING: the engine actor ran under {sorted(engine_on)}, not {ENGINE_NODE}"
        )
    return Result(name, staleness, step_s, ordered, summary, lines)


def main() -> None:
    args = parse_args()
    load = os.getloadavg()[0]
    os.environ |= {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "VLLM_LOGGING_LEVEL": "ERROR"}
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from ray_cluster import ray_env

    os.environ.update(ray_env())
    # Ray starts its workers (the engine actor) at nice 15, the driver runs at 0: the same
    # priority on both sides, so that another process on a core slows both alike
    os.environ["RAY_worker_niceness"] = "0"  # noqa: SIM112 (Ray spells it so)
    for line in machine_lines(threads=1, load=load):
        print(line)
    if len(os.sched_getaffinity(0)) < 2 and not args.address:
        raise SystemExit("benchmarks/async.py needs 2 cores (one per node); this process has 1")
    print(
        f"work per step: {args.prompts} prompts x {args.group} samples x up to "
        f"{args.max_tokens} tokens, {args.updates} update(s), {args.steps} steps per run, "
        f"engine {args.engine}, niceness {args.nice}, "
        f"async rollout.max_staleness={args.staleness}",
        flush=True,
    )
    pinned = args.address is None
    cluster = start_pinned_cluster(nice=args.nice) if pinned else None
    address = args.address or cluster.address
    names = [TRAINER_NODE, ENGINE_NODE]
    roots = {p.pid: names[i] for i, p in enumerate(cluster.procs)} if cluster else {}
    if pinned:
        print(
            f"layout: head node (core {TRAINER_CORE}) = driver + training rank; node1 "
            f"(core {ENGINE_CORE}) = rollout engine actor",
            flush=True,
        )
    results: dict[str, Result] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="grouprl-async-") as tmp:
            for name, staleness in [("sync", 0), ("async", args.staleness)]:
                if args.only in (None, name):
                    results[name] = run_one(
                        name,
                        args,
                        address=address,
                        staleness=staleness,
                        work=Path(tmp),
                        pinned=pinned,
                        roots=roots,
                    )
                    print(results[name].line(), flush=True)
                    print(
                        "\n".join(
                            ["  pinning, read from /proc each second:", *results[name].monitor]
                        )
                    )
    finally:
        if cluster is not None:
            cluster.stop()
    report(results)


def report(results: dict[str, Result]) -> None:
    """The expected overlap from the sync run's times, the accuracies, then the figure."""
    sync, run = results.get("sync"), results.get("async")
    if sync is not None:
        g, t = sync.mean("time/generate_s") or 0.0, sync.mean("time/train_s") or 0.0
        push = sync.mean("time/weight_sync_s") or 0.0
        if g and t:
            bound = (g + t + push) / (max(g, t) + push)
            print(f"expected overlap from the sync run: (G+T+push)/(max(G,T)+push) = {bound:.2f}x")
    if sync is not None and run is not None:
        a = sync.summary.get("held_out_accuracy_after")
        b = run.summary.get("held_out_accuracy_after")
        if a is not None and b is not None:
            print(f"held-out accuracy at equal samples: sync {a:.3f}, async {b:.3f} ({b - a:+.3f})")
        print(f"async speedup: {sync.step_s / run.step_s:.2f}x")
    else:
        only = sync or run
        print(f"{only.name} seconds per step: {only.step_s:.3f}")


if __name__ == "__main__":
    main()
