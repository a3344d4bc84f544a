"""The rollout stream (driver/stream.py) with a fake generate function, no model: which
rounds admission lets start, FIFO batches, dynamic sampling's eviction and filling, the
drop policy, errors and closing, and the checkpoint state's round trip."""

from __future__ import annotations

import json
import threading
import time

import pytest

from grouprl.data.sampler import PromptSampler
from grouprl.driver.source import Generated, oldest_version
from grouprl.driver.stream import Stream, StreamClosed
from grouprl.types import Completion, Trajectory, Turn

N = 2  # samples per prompt


class FakeEngine:
    """Generates each round at ``version`` (what the test pushed last); ``gate``, when
    set, holds each round until the test releases it; ``keep`` says which rows keep
    their group (dynamic sampling's verdict)."""

    def __init__(self, *, gated: bool = False, keep=lambda row: True, fail_at: int | None = None):
        self.version = 0
        self.gate = threading.Semaphore(0) if gated else None
        self.keep, self.fail_at = keep, fail_at
        self.entered: list[int] = []  # rounds started (the version read), gated or not
        self.rounds: list[tuple[int, list[int], int]] = []  # (index, rows, version) done

    def generate(self, rows: list[int], index: int) -> Generated:
        version = self.version  # the weights a generation starts with
        self.entered.append(index)
        if self.gate is not None:
            assert self.gate.acquire(timeout=10), "the test never released this round"
        if index == self.fail_at:
            raise RuntimeError(f"round {index} failed")
        self.rounds.append((index, rows, version))
        groups = [[_traj(row, version, j) for j in range(N)] for row in rows]
        return Generated(groups, [self.keep(row) for row in rows], info=index)


def _traj(row: int, version: int, j: int) -> Trajectory:
    completion = Completion([row, j], [-0.5, -0.25], "stop", text=f"{row}/{j}")
    return Trajectory(
        prompt_index=row, prompt_ids=[1, 2], turns=[Turn(completion)], weight_version=version
    )


def _stream(engine: FakeEngine, *, rows=40, batch=2, staleness=2, **kwargs) -> Stream:
    sampler = PromptSampler(rows, seed=0, shuffle=False)
    return Stream(engine.generate, sampler, batch_size=batch, max_staleness=staleness, **kwargs)


def _until(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for the producer"
        time.sleep(0.002)


def _rows(taken) -> list[int]:
    return [t.prompt_index for t in taken.trajectories[::N]]


def _train(stream: Stream, engine: FakeEngine, steps: int, *, start: int = 0) -> list:
    """The loop's side: take at version k, push k + 1 (after a short 'update')."""
    out = []
    for version in range(start, start + steps):
        taken = stream.take(version)
        out.append((version, taken))
        time.sleep(0.02)
        engine.version = version + 1
        stream.advanced(version + 1)
    return out


def test_wait_admits_a_round_only_while_its_groups_stay_within_the_bound():
    """B = 2 groups a step, max_staleness = 2: at version 0, positions 0..5 (steps 1..3)
    may start, so three rounds run and the fourth waits for a push."""
    engine = FakeEngine()
    stream = _stream(engine, batch=2, staleness=2)
    try:
        first = stream.take(0)
        assert _rows(first) == [0, 1]
        _until(lambda: len(engine.rounds) == 3)
        time.sleep(0.05)
        assert len(engine.rounds) == 3  # round 3 (positions 6, 7: step 4) waits for v1
        stream.advanced(1)
        engine.version = 1
        _until(lambda: len(engine.rounds) == 4)
        assert engine.rounds[3] == (3, [6, 7], 1)
        assert first.metrics["time/wait_generate_s"] >= 0
    finally:
        stream.close()


def test_no_round_starts_once_the_runs_last_groups_are_generated():
    engine = FakeEngine()
    stream = _stream(engine, batch=2, staleness=4, max_groups=6)
    try:
        _train(stream, engine, 3)
        time.sleep(0.05)
    finally:
        stream.close()
    assert len(engine.rounds) == 3


def test_batches_are_fifo_every_prompt_once_and_the_lag_reaches_but_never_passes_the_bound():
    engine = FakeEngine()
    stream = _stream(engine, batch=2, staleness=2)
    try:
        steps = _train(stream, engine, 8)
    finally:
        stream.close()
    trained = [row for _, taken in steps for row in _rows(taken)]
    assert trained == list(range(16))  # the sampler's order, each prompt once
    lags = [version - oldest_version(t) for version, taken in steps for t in taken.trajectories]
    assert max(lags) == 2  # a fast producer runs ahead as far as the bound lets it
    assert sum(len(taken.rounds) for _, taken in steps) <= len(engine.rounds)


def test_seeds_follow_a_global_round_index():
    engine = FakeEngine()
    stream = _stream(engine, batch=2, staleness=1)
    try:
        _train(stream, engine, 4)
    finally:
        stream.close()
    indices = [index for index, _, _ in engine.rounds]
    assert indices == list(range(len(indices)))
    assert [rows for _, rows, _ in engine.rounds[:4]] == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_dynamic_sampling_evicts_groups_without_signal_and_admits_more():
    """Odd rows carry no signal: each round of 2 keeps 1, so a batch takes 2 rounds."""
    engine = FakeEngine(keep=lambda row: row % 2 == 0)
    stream = _stream(engine, batch=2, staleness=1, max_rounds=4)
    try:
        steps = _train(stream, engine, 3)
    finally:
        stream.close()
    assert [_rows(taken) for _, taken in steps] == [[0, 2], [4, 6], [8, 10]]
    evicted = sum(taken.metrics["stream/evicted"] for _, taken in steps)
    assert evicted >= 6 and all(taken.metrics["stream/filled"] == 0 for _, taken in steps)


def test_a_batch_without_enough_signal_is_filled_after_max_rounds(caplog):
    """No group has signal: after max_rounds = 2 rounds the batch is completed with the
    evicted groups, as the synchronous loop does, and a warning says so."""
    engine = FakeEngine(gated=True, keep=lambda row: False)
    stream = _stream(engine, batch=2, staleness=1, max_rounds=2)
    try:
        engine.gate.release(2)
        taken = stream.take(0)
    finally:
        engine.gate.release(10)
        stream.close()
    assert _rows(taken) == [0, 1] and taken.metrics["stream/filled"] == 2
    assert "algo.max_sampling_rounds=2" in caplog.text


def test_drop_policy_drops_stale_groups_and_issues_their_prompts_again_first():
    """B = 2, max_staleness = 1, drop: the buffer holds 2 batches. Rows 4, 5 are generated
    at version 0 and found stale at version 2: dropped, counted, and issued again ahead
    of the sampler's next rows; every prompt still trains once."""
    engine = FakeEngine(gated=True)
    stream = _stream(engine, batch=2, staleness=1, policy="drop")
    try:
        engine.gate.release(2)  # rounds 0 and 1 (rows 0..3) at v0
        assert _rows(stream.take(0)) == [0, 1]
        _until(lambda: len(engine.entered) == 3)  # round 2 (rows 4, 5) started at v0
        engine.version = 1
        stream.advanced(1)
        assert _rows(stream.take(1)) == [2, 3]
        engine.gate.release(1)  # round 2 finishes; round 3 (rows 6, 7) starts at v1
        _until(lambda: len(engine.entered) == 4)
        engine.version = 2
        stream.advanced(2)
        engine.gate.release(1)  # round 3 finishes
        taken = stream.take(2)  # rows 4, 5 lag 2 > 1: dropped
        assert _rows(taken) == [6, 7] and taken.metrics["stream/dropped_stale"] == 2
        engine.gate.release(1)  # round 4: the dropped rows first
        _until(lambda: len(engine.rounds) == 5)
        assert engine.rounds[4] == (4, [4, 5], 2)
        engine.version = 3
        stream.advanced(3)
        assert _rows(stream.take(3)) == [4, 5]
    finally:
        engine.gate.release(10)
        stream.close()


def test_a_producer_error_reaches_the_next_take_and_close_joins_the_thread():
    engine = FakeEngine(gated=True, fail_at=1)
    stream = _stream(engine, batch=2, staleness=1)
    engine.gate.release(1)
    assert _rows(stream.take(0)) == [0, 1]
    engine.gate.release(1)
    with pytest.raises(RuntimeError, match="round 1 failed"):
        stream.take(1)
    with pytest.raises(RuntimeError, match="round 1 failed"):  # not swallowed, every time
        stream.take(1)
    stream.close()
    assert not [t for t in threading.enumerate() if t.name == "rollout-stream"]
    with pytest.raises(RuntimeError, match="round 1 failed"):
        stream.take(1)


def test_close_lets_the_round_in_flight_finish_and_take_then_refuses():
    engine = FakeEngine(gated=True)
    stream = _stream(engine, batch=2, staleness=1)
    engine.gate.release(1)
    stream.take(0)
    _until(lambda: stream.state_dict()["unfinished"] != [])
    closer = threading.Thread(target=stream.close)
    closer.start()
    time.sleep(0.02)
    assert closer.is_alive()  # waits for the generation in flight
    engine.gate.release(1)
    closer.join(timeout=10)
    assert not closer.is_alive()
    with pytest.raises(StreamClosed):
        stream.take(1)


def test_paused_waits_for_the_round_in_flight_and_admits_none():
    engine = FakeEngine(gated=True)
    stream = _stream(engine, batch=2, staleness=3)
    try:
        engine.gate.release(1)
        stream.take(0)
        _until(lambda: stream.state_dict()["unfinished"] != [])  # round 1 held
        seen: list[tuple[int, int, list]] = []  # rounds done and in flight, in the block

        def validate():
            with stream.paused():
                before = len(engine.rounds)
                time.sleep(0.05)
                seen.append((before, len(engine.rounds), stream.state_dict()["unfinished"]))

        validator = threading.Thread(target=validate)
        validator.start()
        time.sleep(0.02)
        assert not seen  # round 1 is still in flight
        engine.gate.release(5)
        validator.join(timeout=10)
        [(before, after, unfinished)] = seen
        assert before == after == 2 and unfinished == []
    finally:
        engine.gate.release(10)
        stream.close()


def test_state_round_trip_re_issues_unfinished_rounds_and_trains_every_prompt_once():
    """A checkpoint taken with a round in flight: the resumed stream trains the buffered
    groups first, then that round again (same rows, same round index: the same seeds),
    then the sampler's next prompts; together with the steps before, each prompt once."""
    engine = FakeEngine(gated=True)
    stream = _stream(engine, batch=2, staleness=2)
    engine.gate.release(2)
    before = [_rows(stream.take(0))]
    _until(lambda: len(engine.rounds) == 2 and stream.state_dict()["unfinished"] != [])
    state = json.loads(json.dumps(stream.state_dict()))  # JSON only
    engine.gate.release(10)
    stream.close()
    assert len(state["buffer"]) == 2 and state["unfinished"] == [{"index": 2, "rows": [4, 5]}]

    engine2 = FakeEngine()
    engine2.version = 1
    resumed = _stream(engine2, batch=2, staleness=2)
    resumed.load_state_dict(state, version=1)
    try:
        after = [_rows(taken) for _, taken in _train(resumed, engine2, 3, start=1)]
    finally:
        resumed.close()
    assert engine2.rounds[0][:2] == (2, [4, 5])
    assert before + after == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert resumed.state_dict()["rounds"] > 3
