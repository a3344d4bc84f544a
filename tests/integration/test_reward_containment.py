"""A reward that misbehaves on five samples (sleeps forever, spins in C, calls os._exit,
segfaults, allocates without bound) costs each of them its place in training (left out,
reward.on_error=drop) within its deadline plus a second, counted, and logged in one
warning with the first failure's sample and row index; training finishes both steps and
the driver's memory stays bounded (the worker's memory limit stopped the allocation)."""

import json
import logging
import re
import textwrap

import pytest

import grouprl
from grouprl.metrics.telemetry import GiB, host_peak_rss

TIMEOUT_S = 3.0
MEMORY_MB = 768
# 768 MB: ~6 blocks of 100 MB past the worker's ~120 MB. Writing them takes ~0.5 s idle but
# over 2 s on two cores shared with other tests (a 2 s deadline cut it short at 300 MB).
CASES = ("sleep", "regex", "exit", "segfault", "allocate")

REWARD = textwrap.dedent(
    """
    import ctypes, os, re, time
    from grouprl.rewards.math import math_answer

    CLAIMS = {claims!r}
    CASES = {cases!r}

    def misbehave(case, claim):
        if case == "sleep":
            time.sleep(3600)
        if case == "regex":
            re.match(r"(a+)+$", "a" * 40 + "b")  # catastrophic backtracking, in C
        if case == "exit":
            os._exit(3)
        if case == "segfault":
            ctypes.string_at(0)
        held = []
        while True:  # "allocate": 100 MB at a time, each one logged before the next
            held.append(b"x" * (100 * 1024 * 1024))  # written, so resident (not calloc's)
            with open(claim, "a") as log:
                log.write("+")

    def score(completion, *, reference, row, **kwargs):
        for case in CASES:  # the first call to claim a case misbehaves that way, once
            claim = os.path.join(CLAIMS, case)
            try:
                fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                continue
            os.write(fd, f"{{row['_index']}} ".encode())
            os.close(fd)
            misbehave(case, claim)
        return math_answer(completion, reference=reference, row=row)
    """
)


@pytest.fixture(scope="module")
def contained_run(tmp_path_factory, tiny_model_dir):
    tmp = tmp_path_factory.mktemp("reward_containment")
    claims = tmp / "claims"
    claims.mkdir()
    reward = tmp / "misbehaving.py"
    reward.write_text(REWARD.format(claims=str(claims), cases=CASES))
    cfg = grouprl.load_config(
        "tiny-arith",
        [
            f"model.path={tiny_model_dir}",
            "rollout.engine=hf",
            "rollout.n=2",
            "rollout.max_tokens=16",
            "data.batch_size=4",
            "data.train.limit=64",
            "data.eval=null",
            "train.mini_batch_size=8",
            "train.micro_batch_size=8",
            "train.steps=2",
            "metrics.progress=false",
            f"reward.functions=[{{name: {reward}:score}}]",
            "reward.correct_function=null",
            f"reward.sandbox.timeout_s={TIMEOUT_S}",
            "reward.sandbox.workers=2",
            f"reward.sandbox.memory_mb={MEMORY_MB}",
            f"trainer.run_dir={tmp / 'run'}",
        ],
    )
    handler = _Collect()
    logging.getLogger("grouprl").addHandler(handler)
    peak_before_gib = host_peak_rss() / GiB
    try:
        summary = grouprl.train(cfg)
    finally:
        logging.getLogger("grouprl").removeHandler(handler)
    lines = [json.loads(x) for x in (tmp / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = {x["step"]: x for x in lines if "reward/errors" in x}
    return summary, steps, claims, handler.lines, peak_before_gib


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_training_finishes_and_each_failure_is_counted(contained_run):
    summary, steps, claims, *_ = contained_run
    assert summary["finished"] and summary["step"] == 2
    assert sorted(p.name for p in claims.iterdir()) == sorted(CASES)  # all five ran in step 1
    first, second = steps[1], steps[2]
    counts = {k: first[f"reward/{k}"] for k in ("timeouts", "crashes", "memory_errors")}
    assert counts == {"timeouts": 2.0, "crashes": 2.0, "memory_errors": 1.0}
    assert first["reward/errors"] == 5.0 and first["reward/worker_restarts"] == 5.0
    assert first["failures/reward"] == 5.0  # the five samples, left out of training
    assert second["reward/errors"] == 0.0  # the fresh workers score the next step
    # the two timeouts run side by side on the two workers; the other three cost a worker
    # start each (~0.3 s: importing grouprl.rewards and the reward file), two at a time, and
    # the allocation writes ~0.65 GB before its limit stops it
    bound = 2 * TIMEOUT_S + 3 * 0.5 + 0.7 + 1.5
    assert first["time/reward_s"] < bound, first["time/reward_s"]


def test_the_failures_are_logged_in_one_warning_with_the_first_sample_and_row(contained_run):
    _, _, claims, lines, _ = contained_run
    [warning] = [line for line in lines if line.startswith("reward function ")]
    assert re.match(r"reward function '.*misbehaving.py:score' failed on 5 of 8 samples", warning)
    for kinds in ("2 timeout", "2 crash", "1 memory"):
        assert kinds in warning, warning
    # the first failure is the first sample to misbehave: a hang, on one of the claimed rows
    rows = {(claims / case).read_text().split()[0] for case in ("sleep", "regex")}
    found = re.search(r"first on sample \d+ \(row (\d+)\): TimeoutError: killed after", warning)
    assert found is not None and found.group(1) in rows, (warning, rows)
    assert warning.endswith("left out of training (reward.on_error=drop)")


def test_memory_stays_bounded(contained_run):
    _, steps, claims, _, peak_before_gib = contained_run
    # the memory limit (resident memory, read by a watchdog 10 times a second) stopped
    # the allocation near the limit: a block (~20 ms to write) may land between two
    # readings, and the watchdog's thread may wait for the interpreter lock behind the
    # driver's for one more (seen once in a full suite run: 9 blocks against 768 MB)
    blocks = len((claims / "allocate").read_text().split()[1])
    assert 1 <= blocks < MEMORY_MB / 100 + 2
    # The driver's peak grew by less than those blocks alone would have added here: the
    # allocation happened in the worker. (The driver's own growth, loading the tiny model
    # and training it with the hf engine, is ~0.2-0.35 GiB; the blocks held ~0.7 GiB.)
    peak = max(s["memory/host_peak_rss_gib"] for s in steps.values())
    print(f"driver peak {peak:.2f} GiB, {peak_before_gib:.2f} before; {blocks} blocks")
    assert peak - peak_before_gib < blocks * 100 * 2**20 / GiB, (peak, peak_before_gib, blocks)
