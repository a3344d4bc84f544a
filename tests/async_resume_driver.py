"""An async `grouprl train` session, SIGKILLed where a plan says, for the exact-resume test
(tests/integration/test_async_resume.py).

    python tests/async_resume_driver.py RUN_DIR MODEL_DIR MAX_STALENESS EPOCHS

The server imports torch, transformers and grouprl once, then for each line read on stdin
(a JSON kill plan) forks one session that resumes RUN_DIR (``trainer.resume=auto``) and
trains until the plan kills it (a fresh interpreter per session spent most of its time
importing). A plan is ``{"phase": PHASE, "call": K, "delay_s": D}``:

    generate   the K-th engine generation of the session, D s into it (a producer's
               round in flight while the trainer trains)
    train      the K-th policy update, D s into it
    save       the K-th checkpoint write, once its files are written but before they
               are published (the writer thread's half-done save)
    log        the K-th write of samples.jsonl, D s into it; if the step's checkpoint
               is being written, once it is complete on disk (the writer thread saves
               it while the loop goes on)
    saved      after the loop's K-th save call, once that checkpoint is complete on disk
               (the step's samples and metrics lines must be written by then)
    time       D s after the session starts, wherever it is (loading, resuming...)
    null       no kill: the session trains to the end

The server prints ``session PID`` as it starts one (a process group of its own, which
the test kills if the session hangs). The session kills itself with SIGKILL (no handler,
no cleanup, as the OOM killer or a lost node would), after printing ``killing PHASE K``
on a line of its own. The server then kills what is left of the session's process group
(its reward workers) and prints ``exited {"signal": S, "code": C}``. Heavy imports are
inside functions: the reward workers, started with spawn, import this script again.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

BATCH, ROWS, GROUP = 4, 16, 4


def overrides(run_dir: Path, model_dir: str, *, staleness: int, epochs: int) -> list[str]:
    """The run: tiny model, transformers engine, 16 prompts of 4 samples, 4 prompts a
    step (``epochs`` x 4 steps), a disk checkpoint every step, every prompt of a step in
    samples.jsonl, no validation (it would use the engine besides the stream)."""
    return [
        f"model.path={model_dir}",
        "rollout.engine=hf",
        f"rollout.n={GROUP}",
        "rollout.max_tokens=24",
        f"rollout.max_staleness={staleness}",
        f"data.batch_size={BATCH}",
        f"data.train.limit={ROWS}",
        "data.eval=null",
        "train.mini_batch_size=8",
        "train.micro_batch_size=8",
        f"train.steps={epochs * ROWS // BATCH}",
        "train.lr=1e-3",
        "train.num_threads=1",
        "reward.sandbox.workers=1",
        "checkpoint.disk.every=1",
        "checkpoint.disk.keep=2",
        f"trainer.log_samples={BATCH}",
        "trainer.eval_before_train=false",
        "trainer.resume=auto",
        "metrics.progress=false",
        "metrics.report=false",  # a subprocess: conftest's default does not reach it
        "metrics.tensorboard=false",
        f"trainer.run_dir={run_dir}",
    ]


PHASES = {  # phase: (module, class or None, function, kill before or after the call)
    "generate": ("grouprl.engines.hf_engine", "HFEngine", "generate", "before"),
    "train": ("grouprl.workers.policy", "PolicyWorker", "update", "before"),
    "save": ("grouprl.ckpt.checkpointer", None, "write_checkpoint", "after"),
    "log": ("grouprl.metrics.samples", "SamplesWriter", "write", "before"),
    "saved": ("grouprl.driver.run", None, "save", "after"),
}


def kill_self(what: str) -> None:
    print(f"\nkilling {what}", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def wait_for_checkpoint(run_dir: Path, *, step: int, timeout_s: float = 30.0) -> None:
    """Until ``step``'s checkpoint is complete on disk (the writer thread saves it while the
    loop goes on to log the step)."""
    from grouprl.ckpt.manifest import is_complete
    from grouprl.ckpt.tiers import step_name

    deadline = time.monotonic() + timeout_s
    while not is_complete(run_dir / "checkpoints" / step_name(step)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the checkpoint of step {step} was not written in {timeout_s} s")
        time.sleep(0.01)


def note_saves() -> set[int]:
    """The steps whose checkpoint this session has handed to the writer (filled as it goes)."""
    from grouprl.ckpt.checkpointer import Checkpointer

    steps: set[int] = set()
    original = Checkpointer.save

    @functools.wraps(original)
    def save(self, step: int, **kwargs: Any) -> bool:
        started = original(self, step, **kwargs)
        if started:
            steps.add(step)
        return started

    Checkpointer.save = save
    return steps


def install_kill(plan: dict[str, Any], *, run_dir: Path) -> None:
    """Wraps the plan's function so that its ``call``-th call SIGKILLs this process."""
    phase, delay = plan["phase"], float(plan.get("delay_s", 0.0))
    if phase is None:
        return
    if phase == "time":
        timer = threading.Timer(delay, kill_self, args=(f"time {delay:.2f}",))
        timer.daemon = True
        timer.start()
        return
    module_name, class_name, name, when = PHASES[phase]
    module = importlib.import_module(module_name)
    owner = getattr(module, class_name) if class_name else module
    original, calls, lock = getattr(owner, name), [0], threading.Lock()
    saving = note_saves() if phase == "log" else set()

    @functools.wraps(original)  # same name: a role's method check accepts it
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with lock:
            calls[0] += 1
            hit = calls[0] == plan["call"]
        if hit and when == "before":
            if phase == "log" and args[1] in saving:
                wait_for_checkpoint(args[0].path.parent, step=args[1])
            time.sleep(delay)
            kill_self(f"{phase} {plan['call']}")
        result = original(*args, **kwargs)
        if hit:
            if phase == "saved" and result:  # save(c, ckpt, ...): c.state.step's started
                wait_for_checkpoint(run_dir, step=args[0].state.step)
            kill_self(f"{phase} {plan['call']}")
        return result

    setattr(owner, name, wrapper)


def session(plan: dict[str, Any], *, run_dir: Path, run: list[str]) -> None:
    from grouprl.config.loader import load_config
    from grouprl.driver.run import train

    install_kill(plan, run_dir=run_dir)
    summary = train(load_config("tiny-arith", run))
    print(f"\nfinished at step {summary['step']}", flush=True)


def main() -> None:
    run_dir, model_dir = Path(sys.argv[1]), sys.argv[2]
    run = overrides(run_dir, model_dir, staleness=int(sys.argv[3]), epochs=int(sys.argv[4]))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch  # noqa: F401  (imported once, before the forks)

    import grouprl.driver.run  # noqa: F401

    for module_name, _, _, _ in PHASES.values():
        importlib.import_module(module_name)
    print("ready", flush=True)
    for line in sys.stdin:
        plan = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.setpgid(0, 0)  # the session and its workers: one group, killed together
                session(plan, run_dir=run_dir, run=run)
                code = 0
            except BaseException:  # shown here: os._exit below would cut its traceback
                traceback.print_exc(file=sys.stdout)
            finally:
                sys.stdout.flush()
                os._exit(code)
        with contextlib.suppress(ProcessLookupError):  # gone already: nothing to signal
            os.setpgid(pid, pid)  # as the session does: in place before anyone signals it
        print(f"session {pid}", flush=True)
        _, status = os.waitpid(pid, 0)
        # reward workers the kill left behind; none left: they followed their parent
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        outcome = {"signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None}
        outcome["code"] = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
        print(f"\nexited {json.dumps(outcome)}", flush=True)


if __name__ == "__main__":
    main()
