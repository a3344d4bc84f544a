"""Exact resume of an async run (issue 28): a `grouprl train` session with
``rollout.max_staleness=2`` is SIGKILLed while generating, while training, while a
checkpoint is half written, while a step is being logged and once a step's checkpoint is
complete (each of the five phases of a step every run, in an order and at a call and
delay drawn from a seed that is fresh each run, printed and named in each failure;
``GROUPRL_TEST_SEED=N`` replays one; twice as many, then kills at random moments, in
`make test-long`), resumed with
``trainer.resume=auto`` each time, and finished. Then, by prompt id, every prompt of
each epoch (two; four in `make test-long`) was trained exactly once, each step trained
the prompts an uninterrupted run trains there (the sampler's order), and no sample
trained more than max_staleness versions behind: the checkpoint kept the finished
groups, the admitted-but-unfinished prompts and the admission counters, and nothing was
lost, replayed or admitted early.

samples.jsonl is the record of what trained: it logs every prompt of a step
(``trainer.log_samples`` = the batch size), and a resumed run drops its lines past the
checkpoint it resumed from. metrics.jsonl likewise: every step has exactly one line,
written before the step's checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from grouprl.ckpt.manifest import is_complete
from grouprl.ckpt.state import TRAINER_FILE, TrainerState
from grouprl.config.loader import load_config
from grouprl.data.sampler import PromptSampler

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from async_resume_driver import BATCH, ROWS, overrides
from long import short_or_long

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
DRIVER = Path(__file__).resolve().parents[1] / "async_resume_driver.py"
MAX_STALENESS = 2
SEED = int(os.environ.get("GROUPRL_TEST_SEED") or random.SystemRandom().randrange(1 << 31))
"""The kill plans' seed: a new one each run, so that runs cover other orders, calls and
delays; a failure names it (replay: GROUPRL_TEST_SEED=N)."""
ROUNDS = short_or_long(1, 2)  # rounds of the four phase kills
MOMENTS = short_or_long(0, 3)  # then kills at random moments
EPOCHS = short_or_long(2, 4)
STEPS = EPOCHS * ROWS // BATCH
SESSION_TIMEOUT_S = 180  # a whole session takes about 40 s on 2 busy cores
PHASES = ("generate", "train", "save", "log", "saved")


def _plans(rng: random.Random) -> list[dict]:
    """Kill plans: each phase once a round, in a seeded order, at an early call, then kills
    at random moments. A round keeps at most 8 steps (a session killed in its K-th update
    or save, or before its K-th step is logged, resumes from step K - 1; one killed once its
    first checkpoint is complete, from step 1; see below for generation), so each of the
    rounds' kills lands by the last step."""
    plans = []
    for _ in range(ROUNDS):
        # a session's K-th round waits for about K - 2 of its steps (a fresh run's first
        # three start before step 1 ends): a kill in it keeps at most K - 1 steps
        phases = [
            {"phase": "generate", "call": rng.randint(4, 5), "delay_s": rng.uniform(0, 0.3)},
            {"phase": "train", "call": rng.randint(1, 2), "delay_s": rng.uniform(0, 0.3)},
            {"phase": "save", "call": rng.randint(1, 2)},
            {"phase": "log", "call": rng.randint(1, 2)},
        ]
        rng.shuffle(phases)
        # last, after the seeded ones: a kill once step K's checkpoint is complete keeps K
        plans += [*phases, {"phase": "saved", "call": 1}]
    return plans + [{"phase": "time", "delay_s": rng.uniform(1.0, 10.0)} for _ in range(MOMENTS)]


class _Driver:
    """The driver's server (it forks a session per kill plan written to it), its output read
    on a thread so that a session that hangs fails the test after SESSION_TIMEOUT_S
    instead of blocking it."""

    def __init__(self, run_dir: Path, tiny_model_dir: str) -> None:
        self.server = subprocess.Popen(
            [
                sys.executable,
                str(DRIVER),
                str(run_dir),
                tiny_model_dir,
                str(MAX_STALENESS),
                str(EPOCHS),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.session_pid: int | None = None

    def _read(self) -> None:
        assert self.server.stdout is not None
        for line in self.server.stdout:
            self.lines.put(line)
        self.lines.put("")  # the server's output ended

    def _next(self, deadline: float) -> str | None:
        """The next line, "" at the end of the output, None past ``deadline``."""
        try:
            return self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return None

    def session(self, plan: dict) -> tuple[dict, list[str]]:
        """Runs one session to its end (killed or finished): how it exited, what it
        printed. A session that runs past SESSION_TIMEOUT_S is killed and fails the test."""
        assert self.server.stdin is not None
        self.server.stdin.write(json.dumps(plan) + "\n")
        self.server.stdin.flush()
        deadline, seen = time.monotonic() + SESSION_TIMEOUT_S, []
        while (line := self._next(deadline)) is not None:
            assert line, "the driver's server stopped:\n" + "".join(seen[-40:])
            if line.startswith("session "):
                self.session_pid = int(line.split()[1])
            elif line.startswith("exited "):
                self.session_pid = None
                return json.loads(line.removeprefix("exited ")), seen
            else:
                seen.append(line)
        self.kill_session()
        raise AssertionError(
            f"{plan}: the session ran past {SESSION_TIMEOUT_S} s (a resume that waits for "
            "groups nobody generates?):\n" + "".join(seen[-40:])
        )

    def kill_session(self) -> None:
        """SIGKILLs the session in flight with its workers (its own process group)."""
        if self.session_pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.session_pid, signal.SIGKILL)
            self.session_pid = None

    def close(self) -> None:
        self.kill_session()
        self.server.kill()
        self.server.wait()


@contextmanager
def _driver(run_dir: Path, tiny_model_dir: str) -> Iterator[_Driver]:
    driver = _Driver(run_dir, tiny_model_dir)
    try:
        first = driver._next(time.monotonic() + SESSION_TIMEOUT_S)
        assert first == "ready\n", f"the driver did not start: {first!r}"
        yield driver
    finally:
        driver.close()


def _trained(run_dir: Path) -> tuple[dict[int, list[int]], list[int]]:
    """The prompt ids (dataset rows) each step trained, and each sample's lag (policy
    version trained, step - 1, less the weight version that sampled it), from
    samples.jsonl."""
    steps: dict[int, list[int]] = {}
    lags = []
    for line in (run_dir / "samples.jsonl").read_text().splitlines():
        record = json.loads(line)
        steps.setdefault(record["step"], []).append(record["prompt_index"])
        lags.append(record["step"] - 1 - record["weight_version"])
    return steps, lags


def _metrics_lines(run_dir: Path) -> Counter[int]:
    """How many lines metrics.jsonl has for each step."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return Counter(record["step"] for record in map(json.loads, lines))


def _resumable(run_dir: Path) -> tuple[int, int, int] | None:
    """What a resume finds now: the newest complete checkpoint's step, and its stream's
    finished groups and unfinished rounds (None: no checkpoint yet)."""
    complete = [p for p in (run_dir / "checkpoints").glob("step_*") if is_complete(p)]
    if not complete:
        return None
    newest = max(complete, key=lambda p: p.name)
    state = TrainerState.read(newest / TRAINER_FILE)
    assert state.stream is not None, f"{newest}: an async run's checkpoint without its stream"
    return state.step, len(state.stream["buffer"]), len(state.stream["unfinished"])


def test_sigkilled_async_run_trains_every_prompt_of_each_epoch_once(tmp_path, tiny_model_dir):
    try:
        _kill_resume_and_check(tmp_path / "run", tiny_model_dir)
    except AssertionError as err:
        raise AssertionError(f"[replay: GROUPRL_TEST_SEED={SEED}] {err}") from err


def _kill_resume_and_check(run_dir: Path, tiny_model_dir: str) -> None:
    print(f"\nkill plans from GROUPRL_TEST_SEED={SEED}")
    plans = _plans(random.Random(SEED))
    kills, resumed = [], []
    with _driver(run_dir, tiny_model_dir) as server:
        for plan in [*plans, {"phase": None}]:  # killed until the run is finished
            outcome, seen = server.session(plan)
            if outcome["code"] == 0:
                break
            landed = [line.split()[1] for line in seen if line.startswith("killing ")]
            assert outcome["signal"] == 9 and landed == [plan["phase"]], (
                f"{plan}: {outcome}\n" + "".join(seen[-60:])
            )
            kills.append(plan["phase"])
            resumed.append(_resumable(run_dir))
    assert outcome == {"signal": None, "code": 0}, "".join(seen[-60:])
    assert f"finished at step {STEPS}\n" in seen, "".join(seen[-60:])
    print(f"\nkills {kills}; resumed at (step, finished groups, unfinished rounds) {resumed}")
    assert set(PHASES) <= set(kills), f"kills {kills}: a phase was never hit"
    # the kills left work in the stream for the resumes to put back, not just a clean step
    assert any(r and r[1] for r in resumed) and any(r and r[2] for r in resumed), resumed

    trained, lags = _trained(run_dir)
    assert sorted(trained) == list(range(1, STEPS + 1)), f"steps logged: {sorted(trained)}"
    assert _metrics_lines(run_dir) == Counter(range(1, STEPS + 1)), "metrics.jsonl"
    # a resume restores the admission counters: no burst of stale rounds after it
    assert min(lags) >= 0 and max(lags) <= MAX_STALENESS, Counter(lags)
    steps_per_epoch = ROWS // BATCH
    for epoch in range(STEPS // steps_per_epoch):
        ids = [
            i for s in range(1, steps_per_epoch + 1) for i in trained[epoch * steps_per_epoch + s]
        ]
        counts = Counter(ids)
        twice = sorted(i for i, n in counts.items() if n > 1)
        missing = sorted(set(range(ROWS)) - set(counts))
        assert not twice and not missing, (
            f"epoch {epoch} (kills: {kills}): prompts trained more than once "
            f"{twice}, never {missing}"
        )
    # the uninterrupted run's order (all 16 rows load, so the sampler's row positions are
    # the rows' ids)
    run = overrides(run_dir, tiny_model_dir, staleness=MAX_STALENESS, epochs=EPOCHS)
    cfg = load_config("tiny-arith", run)
    sampler = PromptSampler(ROWS, seed=cfg.train.seed, shuffle=cfg.data.shuffle)
    expected = {step: sorted(sampler.next_batch(BATCH)) for step in range(1, STEPS + 1)}
    assert {s: sorted(ids) for s, ids in trained.items()} == expected
