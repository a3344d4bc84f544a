"""Stopping the rollout stream (driver/stream.py) with a round in flight: the run ends or
is preempted. With partial rollouts the round stops after its segment in flight on every
replica (engines/segments.PushGate.aborting), goes back to the unfinished rounds (never
to the buffer; no counter moves), and a stream loaded from the state taken after the stop
generates it first, with the same round index and so the same seeds. Without segments the
round's engine call cannot be interrupted: close waits for it and says so.

The engines are scripted (no model) and slow: each call takes SEGMENT_S."""

from __future__ import annotations

import json
import logging
import threading
import time
from contextlib import nullcontext

import pytest

from grouprl.config.replica_timeouts import Bound
from grouprl.data.sampler import PromptSampler
from grouprl.driver.source import Generated
from grouprl.driver.stopping import Stopping
from grouprl.driver.stream import Stream, StreamClosed
from grouprl.engines.base import SamplingSettings
from grouprl.engines.replicas import ReplicaSet, Slot
from grouprl.engines.segments import GenerationAborted, PushGate
from grouprl.types import Completion, Trajectory, Turn

N = 2  # samples per prompt
BATCH = 2  # prompts per round (and per step)
MAX_TOKENS = 12
SEGMENT_TOKENS = 2  # so a round is MAX_TOKENS / SEGMENT_TOKENS = 6 segments
SEGMENT_S = 0.1  # each engine call: a round takes about 0.6 s


class Slow:
    """Every sample runs to its max_tokens; its tokens are its seed x 100 + position, so
    equal seeds give equal samples. Each call takes ``delay_s``; ``calls`` records each
    call's (time it ended, seed)."""

    def __init__(self, delay_s: float = SEGMENT_S) -> None:
        self.delay_s, self.calls = delay_s, []

    def generate(self, prompts, settings):
        time.sleep(self.delay_s)
        out = []
        for i, (prompt, asked) in enumerate(
            zip(prompts, settings.prompt_max_tokens(len(prompts)), strict=True)
        ):
            group = []
            for j in range(settings.group_size):
                seed = settings.seed + i * settings.group_size + j
                tokens = [seed * 100 + len(prompt) + t for t in range(asked)]
                group.append(Completion(tokens, [-0.5] * asked, "length", text="x" * asked))
            out.append(group)
        self.calls.append((time.monotonic(), settings.seed))
        return out

    def released(self):
        return nullcontext()

    def close(self):
        pass


def _replicas(engines, segment_tokens: int | None = SEGMENT_TOKENS) -> ReplicaSet:
    return ReplicaSet(
        engines,
        [Slot(k, f"n{k}", f"10.0.0.{k}") for k in range(len(engines))],
        [f"replica {k}" for k in range(len(engines))],
        segment_tokens=segment_tokens,
    )


def _round(engine: ReplicaSet):
    """The stream's generate function over ``engine``: row r's prompt is [r], round i
    is seeded 1000 * (i + 1) (as the loop seeds by the global round index)."""

    def generate(rows: list[int], index: int) -> Generated:
        settings = SamplingSettings(group_size=N, max_tokens=MAX_TOKENS, seed=1000 * (index + 1))
        groups = engine.generate([[row] for row in rows], settings)
        trajectories = [
            [Trajectory(row, [row], [Turn(c)], weight_version=c.versions[0]) for c in group]
            for row, group in zip(rows, groups, strict=True)
        ]
        return Generated(trajectories, [True] * len(rows), info=index)

    return generate


def _stream(engine: ReplicaSet, **stopping) -> Stream:
    return Stream(
        _round(engine),
        PromptSampler(40, seed=0, shuffle=False),
        batch_size=BATCH,
        max_staleness=1,
        stopping=Stopping(abort=engine.aborting, **stopping),
    )


def _until(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.002)


def _tokens(trajectories: list[Trajectory]) -> list[tuple[int, list[int]]]:
    return [(t.prompt_index, t.completion.token_ids) for t in trajectories]


# --- the gate --------------------------------------------------------------------------------


def test_inside_aborting_no_segment_starts_and_one_waiting_behind_a_push_stops_waiting():
    gate, raised = PushGate(), []

    def waiting_segment() -> None:
        try:
            with gate.segment():
                raised.append(None)
        except GenerationAborted as err:
            raised.append(err)

    with gate.pushing():  # a segment that asks now waits behind the push
        waiter = threading.Thread(target=waiting_segment)
        waiter.start()
        time.sleep(0.05)
        assert raised == []
        with gate.aborting():
            waiter.join(5)
        assert isinstance(raised[0], GenerationAborted)  # did not wait for the push
    with (
        gate.aborting(),
        pytest.raises(GenerationAborted, match="segment boundary"),
        gate.segment(),
    ):
        pass
    with gate.segment():  # after the block the engine generates again
        pass


# --- the stream, with partial rollouts ------------------------------------------------------


def test_close_stops_the_round_in_flight_within_a_segment_and_it_stays_unfinished():
    """Two slow replicas, a round of 6 segments: close() in its second segment returns in
    about one segment (under 3 allowed), no replica is called after it, the round is
    listed unfinished and nothing of it reached the buffer or the counters."""
    engines = [Slow(), Slow()]
    stream = _stream(_replicas(engines), segment_tokens=SEGMENT_TOKENS)
    first = stream.take(0)  # round 0; round 1 (rows 2, 3) starts at once
    assert [t.prompt_index for t in first.trajectories[::N]] == [0, 1]
    round_0_calls = len(engines[0].calls)
    _until(lambda: len(engines[0].calls) >= round_0_calls + 1)  # round 1 is in segment 1
    before = stream.state_dict()
    t0 = time.monotonic()
    stream.close()
    took = time.monotonic() - t0
    assert took < 3 * SEGMENT_S, f"close took {took:.2f} s, a segment {SEGMENT_S} s"
    calls = [len(e.calls) for e in engines]
    assert all(0 < c - round_0_calls < 6 for c in calls), calls  # stopped mid-round, both
    time.sleep(2 * SEGMENT_S)
    assert [len(e.calls) for e in engines] == calls  # no replica is called after close

    state = stream.state_dict()
    assert state["unfinished"] == [{"index": 1, "rows": [2, 3]}]
    assert state["buffer"] == [] and state["spare"] == []
    assert {k: state[k] for k in ("kept", "rounds", "counts")} == {
        k: before[k] for k in ("kept", "rounds", "counts")
    }
    assert state["counts"] == {"dropped_stale": 0, "evicted": 0, "filled": 0}
    with pytest.raises(StreamClosed):
        stream.take(1)


def test_a_stream_loaded_after_a_stop_generates_the_stopped_round_first_with_its_seeds():
    """The state taken after close: the resumed stream's first round is the stopped one
    (same index, rows and seeds), and its samples are those an uninterrupted run draws."""
    engines = [Slow(), Slow()]
    stream = _stream(_replicas(engines), segment_tokens=SEGMENT_TOKENS)
    stream.take(0)
    _until(lambda: len(engines[1].calls) >= 7)  # round 1 past its first segment
    stream.stop()  # the preemption path: stop before the save ...
    state = json.loads(json.dumps(stream.state_dict()))  # ... which sees the round unfinished
    stream.close()
    assert state["unfinished"] == [{"index": 1, "rows": [2, 3]}]

    fast = [Slow(delay_s=0.0), Slow(delay_s=0.0)]
    resumed = _stream(_replicas(fast), segment_tokens=SEGMENT_TOKENS)
    resumed.load_state_dict(state, version=1)
    try:
        taken = resumed.take(1)
    finally:
        resumed.close()
    assert fast[0].calls[0][1] == 2000  # round 1's seed, replica 0 has its first prompt
    assert taken.rounds[0] == 1
    straight = _round(_replicas([Slow(delay_s=0.0)]))([2, 3], 1)
    assert _tokens(taken.trajectories) == _tokens([t for g in straight.groups for t in g])


# --- without partial rollouts ---------------------------------------------------------------


def test_without_segments_close_waits_for_the_engine_call_and_says_how_long(caplog):
    """One call is the whole round: close waits for it, logs the bound and the key that
    stops sooner, and the round is unfinished all the same."""
    engine = Slow(delay_s=0.3)
    bound = Bound(240.0, "rollout.timeout_s=240; raise it if the replica is slow")
    stream = _stream(_replicas([engine], segment_tokens=None), bound=bound)
    stream.take(0)
    _until(lambda: stream.state_dict()["unfinished"] != [])
    time.sleep(0.05)  # inside round 1's call
    t0 = time.monotonic()
    with caplog.at_level(logging.INFO, logger="grouprl.driver.stream"):
        stream.close()
    assert time.monotonic() - t0 > 0.1  # it waited for the call
    assert len(engine.calls) == 2
    assert "waiting for the round in flight: up to 240 s" in caplog.text
    assert "set rollout.partial_rollout_tokens to stop within one segment" in caplog.text
    assert stream.state_dict()["unfinished"] == [{"index": 1, "rows": [2, 3]}]
    assert stream.state_dict()["buffer"] == []
