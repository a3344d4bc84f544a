"""Resuming an async run with a smaller ``rollout.max_staleness`` than the saved run had
(driver/checkpointing.drop_past_bound): the buffered groups past the new bound are dropped
and their prompts generated again first, so the resumed run stays within the bound and
still trains every prompt exactly once; the resume line says what was put back."""

from __future__ import annotations

import json
import logging
import threading
import time
from types import SimpleNamespace

from grouprl.data.sampler import PromptSampler
from grouprl.driver.checkpointing import _resume_stream
from grouprl.driver.source import Generated, RolloutSource, oldest_version
from grouprl.driver.stream import Stream
from grouprl.types import Completion, Trajectory, Turn

B = 2  # groups per step
N = 2  # samples per group


class Engine:
    """Each round's samples at ``version`` (the test's last push); ``gate`` holds rounds."""

    def __init__(self, *, gated: bool) -> None:
        self.version = 0
        self.gate = threading.Semaphore(0) if gated else None
        self.rounds: list[tuple[list[int], int]] = []

    def generate(self, rows: list[int], index: int) -> Generated:
        version = self.version
        if self.gate is not None:
            assert self.gate.acquire(timeout=10), "the test never released this round"
        self.rounds.append((rows, version))
        groups = [[_traj(row, version) for _ in range(N)] for row in rows]
        return Generated(groups, [True] * len(rows))


def _traj(row: int, version: int) -> Trajectory:
    completion = Completion([row], [-0.5], "stop")
    return Trajectory(row, [1], [Turn(completion)], weight_version=version)


def _stream(engine: Engine, *, staleness: int) -> Stream:
    sampler = PromptSampler(40, seed=0, shuffle=False)
    return Stream(engine.generate, sampler, batch_size=B, max_staleness=staleness)


def _saved_with_staleness_3() -> dict:
    """A run with max_staleness=3 saved after step 1 (policy version 1 next): rounds 1-3
    (rows 2..7) were generated at version 0 and wait in the buffer."""
    engine = Engine(gated=True)
    stream = _stream(engine, staleness=3)
    engine.gate.release(4)
    stream.take(0)
    deadline = time.monotonic() + 10
    while len(stream.state_dict()["buffer"]) < 3 * B:
        assert time.monotonic() < deadline, "the producer never filled the buffer"
        time.sleep(0.002)
    state = json.loads(json.dumps(stream.state_dict()))
    stream.close()
    assert [g["row"] for g in state["buffer"]] == [2, 3, 4, 5, 6, 7]
    return state


def test_a_resume_with_a_smaller_bound_drops_the_groups_past_it_and_trains_each_prompt_once(
    caplog,
):
    saved = _saved_with_staleness_3()
    engine = Engine(gated=False)
    engine.version = 1
    resumed = _stream(engine, staleness=1)
    with caplog.at_level(logging.INFO, logger="grouprl.driver"):
        _resume_stream(
            SimpleNamespace(rollouts=resumed), SimpleNamespace(stream=saved, weight_version=1)
        )
    trained, lags = [], []
    try:
        for version in range(1, 5):
            taken = resumed.take(version)
            trained.append([t.prompt_index for t in taken.trajectories[::N]])
            lags += [version - oldest_version(t) for t in taken.trajectories]
            engine.version = version + 1
            resumed.advanced(version + 1)
    finally:
        resumed.close()
    # rows 2, 3 train at version 1 (lag 1); rows 4..7 would train at version 2 with weights
    # 0: dropped, then generated again first, ahead of the sampler's rows 8, 9
    assert trained == [[2, 3], [4, 5], [6, 7], [8, 9]]
    assert max(lags) == 1
    assert [rows for rows, _ in engine.rounds[:2]] == [[4, 5], [6, 7]]
    said = caplog.text
    assert "4 of the 6 buffered groups would lag the policy they train" in said, said
    assert "resumes with 2 buffered groups to train first (4 dropped past " in said, said
    assert "rollout.max_staleness=1), 0 admitted rounds" in said, said
    assert "4 dropped prompts to issue again" in said, said


def test_a_resume_within_the_bound_restores_every_buffered_group(caplog):
    saved = _saved_with_staleness_3()
    resumed = _stream(Engine(gated=False), staleness=3)
    with caplog.at_level(logging.INFO, logger="grouprl.driver"):
        _resume_stream(
            SimpleNamespace(rollouts=resumed), SimpleNamespace(stream=saved, weight_version=1)
        )
    try:
        assert [g["row"] for g in resumed.state_dict()["buffer"]] == [2, 3, 4, 5, 6, 7]
    finally:
        resumed.close()
    assert "resumes with 6 buffered groups to train first (0 dropped" in caplog.text
    assert "would lag" not in caplog.text


def test_a_synchronous_resume_of_a_streamed_checkpoint_says_its_groups_are_not_trained(caplog):
    """rollout.max_staleness=0 takes its rounds inline (``RolloutSource``): a saved stream
    cannot be put back; the warning says what is left untrained and how to train it."""
    saved = _saved_with_staleness_3()
    inline = RolloutSource(Engine(gated=False).generate, PromptSampler(40, seed=0), batch_size=B)
    with caplog.at_level(logging.WARNING, logger="grouprl.driver"):
        _resume_stream(
            SimpleNamespace(rollouts=inline), SimpleNamespace(stream=saved, weight_version=1)
        )
    assert inline.state_dict() is None
    said = caplog.text
    assert "holds a rollout stream (rollout.max_staleness >= 1) with 6 finished" in said, said
    assert "Resume with the original rollout.max_staleness to train them." in said, said
