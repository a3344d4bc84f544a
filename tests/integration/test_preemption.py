"""Preemption: `grouprl train` stopped by a signal to its whole process group saves,
exits with code 75, leaves no process behind, and a resume continues from the checkpoint.

- SIGTERM to the group (`timeout`, a scheduler), transformers engine: the resumed run
  ends with the same parameters and data order as an uninterrupted one.
- SIGINT to the group (Ctrl-C in a terminal), the default vLLM engine: its engine core
  and workers run in a session of their own, so the signal misses them and the step in
  flight finishes with them; they are gone after the exit too, and a resume (on the
  transformers engine: the checkpoint holds no engine state) trains the next step's
  prompts in the sampler's order.

The driver handles SIGINT and SIGTERM with one handler (``ckpt/preempt.py``), so each
signal is run once, with the cheaper engine taking SIGTERM. A second signal exits at
once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from grouprl.ckpt.export import find_checkpoint, part_state
from grouprl.ckpt.preempt import EXIT_PREEMPTED
from grouprl.config.loader import load_config
from grouprl.data.sampler import PromptSampler
from grouprl.driver.run import train

pytestmark = pytest.mark.timeout(600)
STEPS = 5
ROWS, BATCH = 64, 4


def _overrides(run_dir: Path, tiny_model_dir: str) -> list[str]:
    return [
        f"model.path={tiny_model_dir}",
        "rollout.engine=hf",
        "rollout.n=4",
        "rollout.max_tokens=40",
        f"data.batch_size={BATCH}",
        f"data.train.limit={ROWS}",  # of 20,000 (rendering them all: ~2 s a run)
        "data.eval=null",
        "train.mini_batch_size=8",
        "train.micro_batch_size=4",
        f"train.steps={STEPS}",
        "train.lr=1e-3",
        "metrics.progress=false",
        "metrics.report=false",  # a subprocess: conftest's default does not reach it
        "metrics.tensorboard=false",
        f"trainer.run_dir={run_dir}",
        f"checkpoint.memory.dir={run_dir.parent / 'shm'}",
    ]


def _start(
    run_dir: Path, tiny_model_dir: str, *extra: str, own_group: bool = False
) -> subprocess.Popen:
    """``own_group``: the run leads a process group of its own (as a shell's foreground
    job does), which a test can signal whole without signalling itself."""
    cmd = [sys.executable, "-m", "grouprl", "train", "tiny-arith"]
    return subprocess.Popen(
        [*cmd, *_overrides(run_dir, tiny_model_dir), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=os.environ | {"PYTHONUNBUFFERED": "1"},
        start_new_session=own_group,
    )


def _wait_for_step(run_dir: Path, step: int, proc: subprocess.Popen, timeout: float = 300) -> None:
    metrics = run_dir / "metrics.jsonl"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read()
        if metrics.is_file() and any(
            json.loads(line)["step"] >= step for line in metrics.read_text().splitlines() if line
        ):
            return
        time.sleep(0.05)
    raise AssertionError(f"step {step} never came")


def _by_step(run_dir: Path) -> dict[int, dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return {x["step"]: x for x in map(json.loads, lines)}


def _prompts(run_dir: Path) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for line in (run_dir / "samples.jsonl").read_text().splitlines():
        record = json.loads(line)
        out.setdefault(record["step"], []).append(record["prompt"])
    return out


def _prompt_ids(run_dir: Path) -> dict[int, list[int]]:
    """The dataset rows each step trained (``trainer.log_samples``, 4, is the batch)."""
    out: dict[int, list[int]] = {}
    for line in (run_dir / "samples.jsonl").read_text().splitlines():
        record = json.loads(line)
        out.setdefault(record["step"], []).append(record["prompt_index"])
    return {step: sorted(ids) for step, ids in out.items()}


def _processes() -> dict[int, tuple[str, int, int]]:
    """Live processes (not zombies): pid -> (name, parent pid, process group)."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # it just ended
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        state, ppid, pgrp = text[text.rindex(")") + 2 :].split()[:3]
        if state != "Z":
            found[int(stat.parent.name)] = (name, int(ppid), int(pgrp))
    return found


def _group_members(pgid: int) -> list[str]:
    """Live processes in process group ``pgid``: 'pid name' each."""
    return [f"{pid} {name}" for pid, (name, _, group) in _processes().items() if group == pgid]


def _outside_the_group(pid: int) -> dict[int, str]:
    """The descendants of ``pid`` in a process group other than its own (a signal to its
    group misses them): pid -> name."""
    live = _processes()
    outside, frontier = {}, {pid}
    while frontier:
        children = {p for p, (_, ppid, _) in live.items() if ppid in frontier}
        outside |= {p: live[p][0] for p in children if live[p][2] != pid}
        frontier = children
    return outside


def _wait_until_gone(pids: dict[int, str], timeout: float = 20) -> dict[int, str]:
    """Those of ``pids`` (pid -> name) still alive after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        live = _processes()
        left = {p: n for p, n in pids.items() if live.get(p, ("",))[0] == n}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def _wait_for_no_members(pgid: int, timeout: float = 20) -> list[str]:
    deadline = time.monotonic() + timeout
    while (left := _group_members(pgid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def _signal_the_group(
    run_dir: Path, tiny_model_dir: str, sig: signal.Signals, *extra: str, at_step: int
) -> tuple[subprocess.Popen, str, dict[int, str]]:
    """Starts the run leading a group of its own, signals the whole group (as a terminal or
    `timeout` does) once step ``at_step`` is logged and waits for the run to exit. Returns
    the run, its output and the processes it had started outside its group; whatever of
    them or of the group is still alive after the exit fails the test (and is killed)."""
    proc = _start(run_dir, tiny_model_dir, *extra, own_group=True)
    outside: dict[int, str] = {}
    try:
        _wait_for_step(run_dir, at_step, proc)
        outside = _outside_the_group(proc.pid)
        os.killpg(proc.pid, sig)
        output = proc.communicate(timeout=120)[0]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    left = _wait_for_no_members(proc.pid)
    orphans = _wait_until_gone(outside)
    if left:
        os.killpg(proc.pid, signal.SIGKILL)
    for pid in orphans:
        os.kill(pid, signal.SIGKILL)
    assert proc.returncode == EXIT_PREEMPTED, output
    assert f"{sig.name}: saving a checkpoint" in output and "checkpoint saved" in output, output
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output
    assert left == [], f"left in the run's group: {left}"
    assert orphans == {}, f"started outside the group and left running: {orphans}"
    return proc, output, outside


READS_PROC = pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="reads /proc")


@READS_PROC
def test_sigterm_to_the_group_saves_exits_75_and_the_resumed_run_matches(tmp_path, tiny_model_dir):
    """`timeout` or a scheduler: SIGTERM to every process of the group; the reward workers
    ride it out. The resumed run matches an uninterrupted one."""
    straight = tmp_path / "straight"
    train(load_config("tiny-arith", _overrides(straight, tiny_model_dir)))

    run_dir = tmp_path / "preempted"
    _, output, _ = _signal_the_group(run_dir, tiny_model_dir, signal.SIGTERM, at_step=2)
    assert "resume with trainer.resume=auto" in output
    stopped_at = find_checkpoint(run_dir).name
    assert stopped_at < f"step_{STEPS:06d}", stopped_at  # stopped before the end

    train(load_config("tiny-arith", [*_overrides(run_dir, tiny_model_dir), "trainer.resume=auto"]))
    a, b = part_state(find_checkpoint(straight)), part_state(find_checkpoint(run_dir))
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=1e-6, msg=key)
    assert _prompts(straight) == _prompts(run_dir)  # the same data order
    expected, got = _by_step(straight), _by_step(run_dir)
    assert sorted(s for s in got if s > 0) == list(range(1, STEPS + 1))
    for step in range(1, STEPS + 1):
        assert got[step]["reward/mean"] == pytest.approx(expected[step]["reward/mean"])


@pytest.mark.slow
@READS_PROC
def test_ctrl_c_to_the_group_with_vllm_saves_exits_75_and_the_run_resumes(tmp_path, tiny_model_dir):
    """Ctrl-C in a terminal: SIGINT to every process of the foreground group, with the
    default engine. vLLM's engine core and workers take SIGINT as "shut down"; they run
    outside the group, so the step in flight (its generation on them) ends and the run
    saves; the driver then closes them. A resume continues at the next step."""
    run_dir = tmp_path / "run"
    _, _, outside = _signal_the_group(
        run_dir, tiny_model_dir, signal.SIGINT, "rollout.engine=vllm", "train.steps=50", at_step=1
    )
    assert outside, "no process of the vLLM engine outside the run's group: SIGINT reaches it"
    saved = int(find_checkpoint(run_dir).name.removeprefix("step_"))  # complete ones only
    assert 1 <= saved < 50, saved

    # the transformers engine: the checkpoint holds the policy, optimizer, data position
    # and RNG, no engine state, and a vLLM engine would take ~20 s more to start
    resumed = [*_overrides(run_dir, tiny_model_dir), f"train.steps={saved + 1}"]
    summary = train(load_config("tiny-arith", [*resumed, "trainer.resume=auto"]))
    assert summary["step"] == saved + 1 and find_checkpoint(run_dir).name == f"step_{saved + 1:06d}"
    assert sorted(s for s in _by_step(run_dir) if s > 0) == list(range(1, saved + 2))
    cfg = load_config("tiny-arith", resumed)
    sampler = PromptSampler(ROWS, seed=cfg.train.seed, shuffle=cfg.data.shuffle)
    expected = {step: sorted(sampler.next_batch(BATCH)) for step in range(1, saved + 2)}
    assert _prompt_ids(run_dir) == expected  # every row of the loaded 64 is its position


def test_a_second_signal_exits_at_once(tmp_path, tiny_model_dir):
    run_dir = tmp_path / "run"
    proc = _start(run_dir, tiny_model_dir, "train.steps=50")
    _wait_for_step(run_dir, 1, proc)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 128 + signal.SIGTERM, output
    assert "exiting at once" in output
