"""Seconds the training loop blocks per checkpoint: grouprl's asynchronous save against a
synchronous torch.save and against a bare in-memory copy of the same bytes.

    stack of Linear layers + AdamW after one step (--params-m, fp32)
          │ the same tensors; each round runs all three, in rotating order
          ├──────────────────────────────┬──────────────────────────────┐
          ▼                              ▼                              ▼
    grouprl Checkpointer.save        torch.save(state dicts, file)   copy_ into preallocated
    (stage to host memory; DCP       in the same kind of place       CPU tensors (the floor:
    shards written by a thread;      (the loop waits for all of it)  what staging must do)
    wait() outside the timing)
          └──────────────────────────────┴──────────► report ◄─────────┘
         blocking vs torch.save: Nx less   (torch.save s / grouprl blocking s)
         blocking vs memory copy: Mx       (grouprl blocking s / copy s; 1.0 is the floor)

grouprl's time is the wall time of the ``Checkpointer.save`` call, which builds the state
dicts (DCP's ``get_state_dict``) and copies every tensor into host buffers; the first save
also allocates those buffers. Each save starts with an idle writer (``wait()`` between
saves, untimed). torch.save is timed with its ``state_dict()`` calls and without fsync,
as a loop would call it; its file is removed after each save, untimed. The background
write (``ckpt/<tier>_s``: DCP shards, manifest, fsync) is shown for context only. Run it
from the repo root:

    .venv/bin/python benchmarks/checkpoint.py [--params-m 100 --saves 5 --tier disk|memory]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from machine import add_smoke, copy_into, machine_lines

WIDTH = 1024
"""Each layer is Linear(WIDTH, WIDTH): ~1.05M parameters, two tensors."""
GB = 1e9


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--params-m", type=float, default=100.0, help="model size, M fp32 parameters")
    p.add_argument("--saves", type=int, default=5, help="timed saves per method")
    p.add_argument("--tier", choices=["disk", "memory"], default="disk", help="where saves go")
    p.add_argument("--dir", type=Path, help="parent of the temp dir (default: TMPDIR or /dev/shm)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads")
    add_smoke(p, params_m=2, saves=2, threads=1)
    args = p.parse_args()
    if args.params_m <= 0 or args.saves < 1 or args.threads < 1:
        p.error("need --params-m > 0, --saves >= 1, --threads >= 1")
    if args.dir is None:
        args.dir = Path("/dev/shm") if args.tier == "memory" else Path(tempfile.gettempdir())
    if not args.dir.is_dir():
        p.error(f"--dir {args.dir} is not a directory (--tier memory needs /dev/shm or --dir)")
    return args


def build(params_m: float):
    """A Linear stack of about ``params_m`` M parameters and its AdamW after one step."""
    import torch

    layers = max(1, round(params_m * 1e6 / (WIDTH * WIDTH + WIDTH)))
    model = torch.nn.Sequential(*(torch.nn.Linear(WIDTH, WIDTH) for _ in range(layers)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model(torch.randn(4, WIDTH)).square().mean().backward()
    optimizer.step()  # creates exp_avg, exp_avg_sq and step for every parameter
    optimizer.zero_grad(set_to_none=True)
    return model, optimizer, layers


def tensors_in(state) -> list:
    import torch

    if isinstance(state, torch.Tensor):
        return [state]
    if isinstance(state, dict):
        return [t for v in state.values() for t in tensors_in(v)]
    if isinstance(state, list | tuple):
        return [t for v in state for t in tensors_in(v)]
    return []


def make_checkpointer(tier: str, root: Path, state_bytes: int):
    from grouprl.ckpt.checkpointer import Checkpointer
    from grouprl.config.ckpt import CheckpointConfig

    if tier == "memory":
        budget = 3 * state_bytes / (1 << 30) + 1  # never the reason a save is skipped
        tiers = {"memory": {"every": 1, "keep": 1, "dir": str(root / "shm"), "max_gb": budget}}
    else:
        tiers = {"disk": {"every": 1, "keep": 1}}
    cfg = CheckpointConfig.model_validate(tiers)
    return Checkpointer(cfg, run_dir=root / "run", run_name="bench", config_hash="bench")


def trainer_state(step: int):
    from grouprl.ckpt.state import TrainerState, rng_state

    return TrainerState(
        step=step,
        weight_version=step,
        sampler={"epoch": 0, "position": step},
        scheduler={"last_epoch": step},
        rng=rng_state(),
        eval_before={},
    )


def grouprl_save(ckpt, *, step: int, model, optimizer, tier: str, state_bytes: int):
    """Seconds ``Checkpointer.save`` blocked, and seconds its background write took."""
    from grouprl.ckpt.resume import training_state

    trainer = trainer_state(step)  # built before the call, as the loop does
    started = time.perf_counter()
    saved = ckpt.save(
        step,
        state=lambda: training_state(model=model, optimizer=optimizer),
        trainer=trainer,
        files={"hf/config.json": b"{}"},
    )
    blocking = time.perf_counter() - started
    ckpt.wait()  # untimed: the next save starts with an idle writer
    metrics = ckpt.drain_metrics()
    assert saved and metrics["ckpt/state_bytes"] == state_bytes, metrics
    return blocking, metrics[f"ckpt/{tier}_s"]


def torch_save(target: Path, *, model, optimizer) -> float:
    import torch

    started = time.perf_counter()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, target)
    seconds = time.perf_counter() - started
    target.unlink()
    return seconds


def measure(args, root: Path, *, model, optimizer, sources: list, state_bytes: int):
    """Per method, the seconds of each save; rounds rotate the order, so drift in the
    machine's load hits every method alike."""
    import torch

    buffers = [torch.empty_like(t).zero_() for t in sources]  # allocated and touched
    times: dict[str, list[float]] = {
        m: [] for m in ("grouprl", "torch.save", "memory copy", "background")
    }
    ckpt = make_checkpointer(args.tier, root, state_bytes)
    try:
        for i in range(args.saves):
            step = i + 1

            def ours(step: int = step) -> None:
                blocking, background = grouprl_save(
                    ckpt,
                    step=step,
                    model=model,
                    optimizer=optimizer,
                    tier=args.tier,
                    state_bytes=state_bytes,
                )
                times["grouprl"].append(blocking)
                times["background"].append(background)

            def theirs(step: int = step) -> None:
                target = root / f"torch_save_{step}.pt"
                times["torch.save"].append(torch_save(target, model=model, optimizer=optimizer))

            def floor() -> None:
                times["memory copy"].append(copy_into(buffers, sources))

            runs = [ours, theirs, floor]
            for run in runs[i % 3 :] + runs[: i % 3]:
                run()
            log(f"round {step}: " + ", ".join(f"{m} {v[-1]:.3f} s" for m, v in times.items()))
        assert [f.step for f in ckpt.newest()] == [args.saves], ckpt.newest()
    finally:
        ckpt.close()
    return times


def log(message: str) -> None:
    print(f"[checkpoint] {message}", file=sys.stderr, flush=True)


def main() -> None:
    args = parse_args()
    load_at_start = os.getloadavg()[0]
    import torch

    from grouprl.ckpt.resume import training_state

    torch.set_num_threads(args.threads)
    log(f"building ~{args.params_m:g}M parameters and AdamW state")
    model, optimizer, layers = build(args.params_m)
    params = sum(p.numel() for p in model.parameters())
    sources = tensors_in(training_state(model=model, optimizer=optimizer))
    state_bytes = sum(t.numel() * t.element_size() for t in sources)
    with tempfile.TemporaryDirectory(prefix="grouprl-ckpt-bench-", dir=args.dir) as tmp:
        times = measure(
            args,
            Path(tmp),
            model=model,
            optimizer=optimizer,
            sources=sources,
            state_bytes=state_bytes,
        )
    report(args, times, params=params, layers=layers, sources=sources, load=load_at_start)


def report(args, times, *, params: int, layers: int, sources: list, load: float) -> None:

    state_bytes = sum(t.numel() * t.element_size() for t in sources)
    print("\n".join(machine_lines(threads=args.threads, load=load)))
    print(
        f"state: {params / 1e6:.1f}M fp32 parameters ({layers} x Linear({WIDTH}, {WIDTH})) + "
        f"AdamW after one step = {state_bytes / GB:.2f} GB in {len(sources)} tensors"
    )
    print(f"tier: {args.tier}, temp dir under {args.dir}, {args.saves} saves per method")
    print(f"{'seconds per save':36s} {'median':>8s} {'min':>8s} {'first':>8s}")
    labels = {
        "grouprl": "grouprl save (loop blocks)",
        "torch.save": "torch.save (loop blocks)",
        "memory copy": "memory copy (floor)",
        "background": f"grouprl background write ({args.tier}_s)",
    }
    med = statistics.median
    for key, label in labels.items():
        values = times[key]
        print(f"{label:36s} {med(values):8.3f} {min(values):8.3f} {values[0]:8.3f}")
    blocking = med(times["grouprl"])
    print(f"blocking vs torch.save: {med(times['torch.save']) / blocking:.2f}x less")
    print(f"blocking vs memory copy: {blocking / med(times['memory copy']):.2f}x")


if __name__ == "__main__":
    main()
