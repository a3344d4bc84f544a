"""Rollout as a stream: a producer thread generates rounds of prompts while the trainer
learns, and admission control bounds how stale a sample can be when it trains.

    producer thread (this file)                       trainer (driver/loop.one_step)
    ───────────────────────────                       ──────────────────────────────
    admit a round: B prompts (re-issued ones first,   take(): the next B kept groups,
      then the sampler) while every group's lag       FIFO (waits: time/wait_generate_s)
      can stay <= max_staleness ◄─── waits on ───┐          │
    generate + score at engine version v          │    train them (policy version k)
    each group: signal? ── kept ─► buffer (FIFO)  │    with engine.pushing(): push k + 1
                        └─ evicted (spare filler) └──── advanced(k + 1): notify

Rounds, their seeds and dynamic sampling's fill rule are ``RolloutSource``'s
(driver/source.py); here a round's index is a global counter, so the samples do not
depend on timing where the weight versions do not. Kept groups take global positions
p = 0, 1, ... in FIFO order (counted across resumes); the group at position p trains at
step p // B + 1 with policy version p // B. Admission (``staleness_policy=wait``): a round
started at engine version v is admitted only while its last group's ``p // B - v`` is at
most ``max_staleness``; otherwise the producer waits until a push raises v. Evicted groups
(dynamic sampling) take no position, so the groups after them train sooner, never later.
``staleness_policy=drop`` admits while the buffer has room for ``max_staleness + 1``
batches and, at take time, drops a group that lags more than ``max_staleness`` (counted;
its prompt is issued again ahead of new ones).

``state_dict`` is taken under the stream's lock, so every admitted prompt is in exactly
one place: a finished group in the buffer, or the round in flight (re-issued whole, with
its round index and so its seeds, by ``load_state_dict``), or already trained.

Stopping (the run ends or is preempted): ``stop`` admits nothing more and aborts the
engine's generation (``driver/stopping.py``): with partial rollouts the round in flight
stops after its segment in flight on every replica; without, its engine call cannot be
interrupted and ``close`` waits for it (bounded by the replicas' call bound). Either way
the round goes back to the unfinished rounds, never to the buffer, and no counter moves:
a checkpoint taken after the stop issues it again, with the same index and seeds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any, Literal

from grouprl.data.sampler import PromptSampler
from grouprl.driver.source import Generate, Generated, Group, RolloutSource, Round, Taken, group_lag
from grouprl.driver.stopping import Stopping
from grouprl.engines.segments import GenerationAborted
from grouprl.types import Trajectory, trajectory_from_dict, trajectory_to_dict

logger = logging.getLogger(__name__)

STATE_FORMAT = 1
"""The version of ``Stream.state_dict``'s layout (a checkpoint's ``trainer.json``)."""


def spans_versions(t: Trajectory) -> bool:
    """Whether the trajectory's tokens were produced by more than one weight version."""
    return len({v for turn in t.turns for v in turn.completion.versions}) > 1


class StreamClosed(RuntimeError):
    """``take`` on a stream that was closed."""


class Stream(RolloutSource):
    """The producer thread, the buffer and admission control (module docstring);
    ``generate``, ``batch_size`` and ``max_rounds`` as ``RolloutSource``'s. ``max_groups``:
    the kept groups the run trains in all (no round starts once they are generated). The
    first ``take`` says which version the engine serves (a resumed run's), unless
    ``load_state_dict`` did; ``advanced`` raises it after each push. ``stopping``: how
    ``stop`` and ``close`` stop a round in flight."""

    threaded = True

    def __init__(
        self,
        generate: Generate,
        sampler: PromptSampler,
        *,
        batch_size: int,
        max_staleness: int,
        policy: Literal["wait", "drop"] = "wait",
        max_rounds: int = 1,
        max_groups: int | None = None,
        stopping: Stopping | None = None,
    ) -> None:
        assert max_staleness >= 1, "max_staleness=0 takes its rounds inline (RolloutSource)"
        super().__init__(generate, sampler, batch_size=batch_size, max_rounds=max_rounds)
        self.max_staleness, self.policy, self.max_groups = max_staleness, policy, max_groups
        self.stopping = stopping or Stopping()
        self._version = 0
        self._loaded = False  # whether load_state_dict set the counters
        self._rounds = 0  # rounds admitted so far: the next round's index
        self._pending: deque[Round] = deque()  # rounds to issue again whole (a resume)
        self._reissue: deque[int] = deque()  # rows to issue ahead of the sampler (drops)
        self._in_flight: Round | None = None
        self._admission_wait_s = 0.0
        self._paused = 0
        self._closed = False
        self._aborting = ExitStack()  # holds the engine's abort from stop to close
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    # ── the trainer's side ──────────────────────────────────────────────────────────

    def take(self, version: int) -> Taken:
        """The next ``batch_size`` groups to train policy ``version`` (waiting for them);
        starts the producer on the first call. A producer's error is raised here.

        ``version`` is the steps trained so far (the loop's ``weight_version``): on a
        first call without a loaded state, the batches before it count as trained."""
        self._start(version)
        started = time.perf_counter()
        with self._cond:
            while True:
                self._raise_if_failed()
                if self.policy == "drop":
                    self._drop_stale(version)
                if len(self._buffer) >= self.batch_size:
                    break
                self._cond.wait()
            groups, rounds, counts = self._pop()
            self._cond.notify_all()  # room in the buffer (drop policy)
            metrics = {
                "time/wait_generate_s": time.perf_counter() - started,
                "stream/buffer_groups": float(len(self._buffer)),
                "stream/in_flight_groups": float(
                    len(self._in_flight.rows) if self._in_flight else 0
                ),
                "stream/admission_wait_s": self._admission_wait_s,
                **{f"stream/{k}": float(v) for k, v in counts.items()},
            }
            self._admission_wait_s = 0.0
        trajectories = [t for g in groups for t in g.trajectories]
        metrics["stream/spanning_samples"] = float(sum(map(spans_versions, trajectories)))
        return Taken(trajectories, rounds, metrics, filled=counts["filled"])

    def advanced(self, version: int) -> None:
        """The engine serves ``version`` now (after a push): rounds waiting for it may go."""
        with self._cond:
            self._version = version
            self._cond.notify_all()

    @contextmanager
    def paused(self) -> Iterator[None]:
        """No round is in flight and none is admitted inside the block (validation uses
        the engine); the producer's error, if any, is raised on entry."""
        with self._cond:
            self._paused += 1
            try:
                while self._in_flight is not None and self._error is None:
                    self._cond.wait()
                self._raise_if_failed()
            except BaseException:
                self._paused -= 1
                raise
        try:
            yield
        finally:
            with self._cond:
                self._paused -= 1
                self._cond.notify_all()

    def stop(self) -> None:
        """Stops the stream without waiting: nothing more is admitted, and the round in
        flight stops at its next segment boundary (``Stopping``: logged). It stays in
        ``state_dict``'s unfinished rounds; none of its samples reaches the buffer. The
        preemption path stops the stream before its save, so that generation does not
        compete with it; ``close`` waits for the producer."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            in_flight = self._in_flight
            self._cond.notify_all()
        self._aborting.enter_context(self.stopping.abort())
        if in_flight is not None:
            logger.info(self.stopping.line(index=in_flight.index, prompts=len(in_flight.rows)))

    def close(self) -> None:
        """``stop``, then waits for the producer: for the segment in flight with partial
        rollouts, else for the round's engine call (``Stopping``)."""
        self.stop()
        try:
            if self._thread is not None:
                self._thread.join()
        finally:
            self._aborting.close()  # the engine generates again (a test's shared one)

    # ── checkpoints ─────────────────────────────────────────────────────────────────

    def state_dict(self) -> dict[str, Any]:
        """The stream as JSON, consistent under the lock: the finished groups (buffer and
        spare), the rounds admitted but unfinished, the rows to issue again, the sampler
        after the last admitted prompt, the position and round counters."""
        with self._cond:
            # the round in flight came first off the pending ones: it is issued first again
            unfinished = ([self._in_flight] if self._in_flight else []) + list(self._pending)
            return {
                "format": STATE_FORMAT,
                "buffer": [_group_to_dict(g) for g in self._buffer],
                "spare": [_group_to_dict(g) for g in self._spare],
                "unfinished": [{"index": r.index, "rows": r.rows} for r in unfinished],
                "reissue": list(self._reissue),
                "sampler": self.sampler.state_dict(),
                "kept": self._kept,
                "rounds": self._rounds,
                "filling_rounds": self._filling_rounds,
                "counts": dict(self._counts),
            }

    def load_state_dict(self, state: dict[str, Any], *, version: int) -> None:
        """Puts a checkpoint's stream back before the producer starts: its finished groups
        in the buffer, its unfinished rounds first in line (same rows, same round index
        and so the same seeds), generated at ``version`` (the restored weights')."""
        assert self._thread is None, "load the state before the first take"
        if state.get("format") != STATE_FORMAT:
            raise ValueError(
                f"the checkpoint's rollout stream state has format {state.get('format')!r}; "
                f"this grouprl reads format {STATE_FORMAT}"
            )
        with self._cond:
            self._buffer = deque(_group_from_dict(g) for g in state["buffer"])
            self._spare = [_group_from_dict(g) for g in state["spare"]]
            self._pending = deque(
                Round(index=int(r["index"]), rows=[int(i) for i in r["rows"]], version=version)
                for r in state["unfinished"]
            )
            self._reissue = deque(int(i) for i in state["reissue"])
            self.sampler.load_state_dict(state["sampler"])
            self._kept, self._rounds = int(state["kept"]), int(state["rounds"])
            self._filling_rounds = int(state["filling_rounds"])
            self._counts.update({k: int(v) for k, v in state["counts"].items()})
            self._version = version
            self._loaded = True

    # ── the producer ────────────────────────────────────────────────────────────────

    def _start(self, version: int) -> None:
        if self._thread is None:
            if not self._loaded:
                self._version, self._kept = version, version * self.batch_size
            self._thread = threading.Thread(target=self._produce, name="rollout-stream")
            self._thread.start()

    def _produce(self) -> None:
        try:
            while (round_ := self._admit()) is not None:
                try:
                    generated = self.generate(round_.rows, round_.index)
                except BaseException as err:
                    if self._unfinished_at_stop(round_, err):
                        return
                    raise
                self._finish(round_, generated)
        except BaseException as err:  # reaches the trainer at its next take
            with self._cond:
                self._error = err
                self._in_flight = None
                self._cond.notify_all()

    def _admit(self) -> Round | None:
        """The next round once admission allows it (None: closed). Rows are drawn under
        the lock, so a checkpoint sees each admitted prompt in flight or finished."""
        waited = time.perf_counter()
        with self._cond:
            while not self._closed and (self._paused or not self._admissible()):
                self._cond.wait()
            self._admission_wait_s += time.perf_counter() - waited
            if self._closed:
                return None
            if self._pending:
                round_ = self._pending.popleft()
                round_ = Round(round_.index, round_.rows, self._version)
            else:
                again = min(len(self._reissue), self.batch_size)
                rows = [self._reissue.popleft() for _ in range(again)]
                if len(rows) < self.batch_size:
                    rows += self.sampler.next_batch(self.batch_size - len(rows))
                round_ = Round(self._rounds, rows, self._version)
                self._rounds += 1
            self._in_flight = round_
            return round_

    def _unfinished_at_stop(self, round_: Round, err: BaseException) -> bool:
        """Whether ``err`` ended ``round_`` because the stream stopped (then the round is
        unfinished again, first in line); an error of a stopped stream counts too (the run
        is ending, and a resumed run generates the round again), with a warning."""
        with self._cond:
            if not self._closed:
                return False
            self._in_flight = None
            self._pending.appendleft(round_)
            self._cond.notify_all()
        if isinstance(err, GenerationAborted):
            logger.info("round %d stopped between segments; it stays unfinished", round_.index)
        else:
            logger.warning(
                "round %d failed while the rollout stream stopped (%s: %s); it stays "
                "unfinished, and a resumed run generates it again",
                round_.index,
                type(err).__name__,
                err,
            )
        return True

    def _admissible(self) -> bool:
        """Whether a round of ``batch_size`` prompts may start now (module docstring)."""
        size = len(self._pending[0].rows) if self._pending else self.batch_size
        if self.max_groups is not None and self._kept >= self.max_groups:
            return False  # the last step's groups are all generated
        if self.policy == "drop":
            return len(self._buffer) + size <= (self.max_staleness + 1) * self.batch_size
        last = self._kept + size - 1  # every group kept: the latest it can train
        return last // self.batch_size - self._version <= self.max_staleness

    def _finish(self, round_: Round, generated: Generated) -> None:
        """A round's groups kept or evicted (``RolloutSource._keep``), unless the stream
        stopped meanwhile: its samples are not trained, it stays unfinished."""
        with self._cond:
            self._in_flight = None
            if self._closed:
                self._pending.appendleft(round_)
            else:
                self._keep(round_, generated)
            self._cond.notify_all()

    def _drop_stale(self, version: int) -> None:
        """``staleness_policy=drop``: groups that would train ``version`` more than
        ``max_staleness`` behind leave the buffer; their prompts are issued again first."""
        fresh: deque[Group] = deque()
        for group in self._buffer:
            if group_lag(group.trajectories, version=version) > self.max_staleness:
                self._reissue.append(group.row)
                self._kept -= 1  # positions count the groups that train
                self._count("dropped_stale")
            else:
                fresh.append(group)
        if len(fresh) != len(self._buffer):
            self._buffer = fresh
            self._cond.notify_all()

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error
        if self._closed:
            raise StreamClosed("the rollout stream was closed")


def _group_to_dict(group: Group) -> dict[str, Any]:
    return {
        "row": group.row,
        "version": group.version,
        "trajectories": [trajectory_to_dict(t) for t in group.trajectories],
    }


def _group_from_dict(d: dict[str, Any]) -> Group:
    trajectories = [trajectory_from_dict(t) for t in d["trajectories"]]
    return Group(trajectories, int(d["row"]), int(d["version"]))
