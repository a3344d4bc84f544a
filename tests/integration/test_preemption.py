"""Preemption: `grouprl train` stopped by SIGTERM saves, exits with code 75, and the
resumed run ends with the same parameters and the same data order as an uninterrupted
one. Ctrl-C or SIGTERM to the whole process group (a terminal, `timeout`) does the same
with every engine: the engine and worker processes it starts ignore it. A second signal
exits at once."""

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
from grouprl.driver.run import train

pytestmark = pytest.mark.timeout(600)
STEPS = 5


def _overrides(run_dir: Path, tiny_model_dir: str) -> list[str]:
    return [
        f"model.path={tiny_model_dir}",
        "rollout.engine=hf",
        "rollout.n=4",
        "rollout.max_tokens=40",
        "data.batch_size=4",
        "data.train.limit=64",  # of 20,000 (rendering them all: ~2 s a run)
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


def test_sigterm_saves_exits_75_and_the_resumed_run_matches(tmp_path, tiny_model_dir):
    straight = tmp_path / "straight"
    train(load_config("tiny-arith", _overrides(straight, tiny_model_dir)))

    run_dir = tmp_path / "preempted"
    proc = _start(run_dir, tiny_model_dir)
    _wait_for_step(run_dir, 2, proc)
    proc.send_signal(signal.SIGTERM)
    output = proc.communicate(timeout=300)[0]
    assert proc.returncode == EXIT_PREEMPTED, output
    assert "SIGTERM" in output and "resume with trainer.resume=auto" in output
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


def _group_members(pgid: int) -> list[str]:
    """Live processes (not zombies) in process group ``pgid``: 'pid name' each."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # it just ended
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        state, _ppid, pgrp = text[text.rindex(")") + 2 :].split()[:3]
        if int(pgrp) == pgid and state != "Z":
            found.append(f"{stat.parent.name} {name}")
    return found


def _wait_for_no_members(pgid: int, timeout: float = 20) -> list[str]:
    deadline = time.monotonic() + timeout
    while (left := _group_members(pgid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="reads /proc")
@pytest.mark.parametrize(
    ("engine", "sig"),
    [
        pytest.param("vllm", signal.SIGTERM, marks=pytest.mark.slow, id="vllm-SIGTERM"),
        pytest.param("hf", signal.SIGINT, id="hf-SIGINT"),
    ],
)
def test_a_signal_to_the_process_group_saves_and_exits_75(tmp_path, tiny_model_dir, engine, sig):
    """Ctrl-C in a terminal (SIGINT) and `timeout` (SIGTERM) signal every process of the
    foreground group: the engine's processes and the reward workers must ride it out,
    the run saves and exits 75, and nothing of the group is left behind."""
    run_dir = tmp_path / "run"
    proc = _start(
        run_dir, tiny_model_dir, f"rollout.engine={engine}", "train.steps=50", own_group=True
    )
    try:
        _wait_for_step(run_dir, 1, proc)
        os.killpg(proc.pid, sig)
        output = proc.communicate(timeout=120)[0]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    left = _wait_for_no_members(proc.pid)
    if left:
        os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == EXIT_PREEMPTED, output
    assert signal.Signals(sig).name in output and "checkpoint saved" in output, output
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output
    assert find_checkpoint(run_dir).name < "step_000050"  # complete: find_checkpoint lists those
    assert left == [], left
