"""A training loop stand-in for the crash test: it resumes from the newest checkpoint,
then takes steps and saves after every one (memory every step, disk every 2nd, S3 every
3rd), until it is killed.

After step s every parameter equals s and the optimizer has taken s steps, so a loaded
checkpoint shows at once whether its pieces belong together.

    python tests/ckpt_crash_driver.py ROOT [--endpoint-url URL --bucket NAME]

The process imports torch and the checkpointer once, then forks one such loop per line
read on stdin (a fresh interpreter per trial spent most of its time importing). Each loop
prints ``ready at step N pid P`` once it has resumed; once its pid is gone the server
prints ``exited`` on a line of its own.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

from grouprl.ckpt.checkpointer import Checkpointer
from grouprl.ckpt.resume import find_resume, load_training, training_state
from grouprl.ckpt.state import TrainerState
from grouprl.config.ckpt import CheckpointConfig

WIDTH, LAYERS = 512, 8  # ~2.1M parameters: 8 MB of weights, 25 MB with AdamW's moments


def make_model() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)])
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


def make_checkpointer(root: Path, *, endpoint_url: str | None, bucket: str | None) -> Checkpointer:
    cfg = {
        "namespace": "crash",
        "memory": {"every": 1, "keep": 2, "dir": str(root / "shm")},
        "disk": {"every": 2, "keep": 2, "dir": str(root / "disk")},
        "on_busy": "wait",
    }
    if bucket is not None:
        cfg["s3"] = {"uri": f"s3://{bucket}/runs", "endpoint_url": endpoint_url, "every": 3}
    return Checkpointer(
        CheckpointConfig.model_validate(cfg), run_dir=root, run_name="crash", config_hash="c"
    )


def take_step(model, optimizer, step: int) -> None:
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    optimizer.step()
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float(step))


def trainer_state(step: int) -> TrainerState:
    return TrainerState(
        step=step,
        weight_version=step,
        sampler={"position": step},
        scheduler={},
        rng={},
        eval_before={},
    )


def save_until_killed(root: Path, *, endpoint_url: str | None, bucket: str | None) -> None:
    torch.set_num_threads(1)
    model, optimizer = make_model()
    ckpt = make_checkpointer(root, endpoint_url=endpoint_url, bucket=bucket)
    found = find_resume("auto", ckpt, restore_dir=root / "restore")
    step = 0
    if found is not None:
        step = load_training(found.path, model=model, optimizer=optimizer).step
    print(f"ready at step {step} pid {os.getpid()}", flush=True)
    while True:
        step += 1
        take_step(model, optimizer, step)
        ckpt.save(
            step,
            state=lambda: training_state(model=model, optimizer=optimizer),
            trainer=trainer_state(step),
            files={"note.txt": f"step {step}\n".encode()},
        )
        print(f"step {step}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("root", type=Path)
    parser.add_argument("--endpoint-url")
    parser.add_argument("--bucket")
    args = parser.parse_args()
    for _ in sys.stdin:
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            try:
                save_until_killed(args.root, endpoint_url=args.endpoint_url, bucket=args.bucket)
            finally:
                os._exit(1)
        os.waitpid(pid, 0)
        print("\nexited", flush=True)  # on a line of its own, whatever the kill cut short


if __name__ == "__main__":
    sys.exit(main())
