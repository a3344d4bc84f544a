"""Partial rollouts: generation in segments, with weight pushes between them, and the
weight version of every token.

::

    driver:  with engines.pushing(): push v+1 ── PushGate: waits until no segment is in
                                                 flight, holds new segments off meanwhile
    generate(P prompts x n) ─► segment 0: every sample, at most S tokens (the call's seeds)
                  ◄── a waiting push runs here: the token boundary ──┘
             ─► segment 1: each unfinished sample on its own, prompt = its prompt + its
                tokens so far, at most S more (group members are separate prompts now)
             ─► ... until every sample stopped (EOS) or reached its own max_tokens

The granularity of an abort is one segment (``rollout.partial_rollout_tokens`` = S
tokens): a push waits for the segment in flight on every replica, never for the rest of a
long generation. The same boundary stops a generation for good (``PushGate.aborting``:
the rollout stream closing as the run ends or is preempted): the next segment raises
``GenerationAborted`` instead of starting, on every replica.

This is AReaL's interruptible generation and PipelineRL's in-flight update done at the
call level, not inside the engine: the engine is asked again with the prefix as prompt,
so its KV cache for the prefix is recomputed with the new weights (vLLM resets its prefix
cache at a push), which is what "continue with the new weights" means.

Seeds: segment 0 is the call as it would be without segments, with every prompt's
max_tokens lowered to S, so it draws the same first S tokens. Continuation segment s
(1, 2, ...) is one engine call with seed ``seeds.segment_seed(seed, s)``; the engine adds
the sample's place among the samples still running. A rerun draws the same tokens (which
samples still run is itself decided by the same draws), and the number of replicas does
not change them (the replica set splits each segment's call as it splits any call).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field, replace

from grouprl.engines.base import SamplingSettings, replicate
from grouprl.seeds import segment_seed
from grouprl.types import Completion

Call = Callable[[list[list[int]], SamplingSettings], list[list[Completion]]]
"""One engine call over the replicas (``ReplicaSet`` splits it), under the gate."""


class GenerationAborted(RuntimeError):
    """A generation stopped at a segment boundary because its caller aborts generation
    (``PushGate.aborting``): the rollout stream is closing (the run ends or is
    preempted), and the samples' tokens so far are dropped; the stream issues their round
    again on resume."""


class PushGate:
    """A readers/writer lock between generation segments (readers: any number at once)
    and weight pushes (the writer: alone). Writer-preferring: once a push waits, new
    segments wait behind it, so a push never starves behind a stream of segments; the
    segments in flight finish first.

    A thread may nest ``pushing`` blocks and ``segment`` blocks each (a push that calls
    ``update_weights``, which takes the gate too); a push from inside a segment, or a
    segment from inside a push, would wait for itself and raises instead.

    Inside ``aborting``, no segment starts: each raises ``GenerationAborted`` (one that
    waits behind a push too), so every generation stops after its segment in flight."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._segments = 0  # in flight, all threads
        self._waiting = 0  # pushes waiting for the segments in flight
        self._writer: int | None = None  # the thread pushing now
        self._depth = 0  # the writer's nested pushing blocks
        self._local = threading.local()  # this thread's nested segment blocks
        self._aborting = 0  # open aborting blocks: no segment starts
        self.wait_s = 0.0
        """Seconds pushes waited for segments in flight (``drain``)."""

    @property
    def pushes_waiting(self) -> int:
        """Pushes waiting for the segments in flight to finish."""
        with self._cond:
            return self._waiting

    @contextmanager
    def segment(self) -> Iterator[None]:
        """A generation segment: waits while a push runs or waits to run; raises
        ``GenerationAborted`` inside ``aborting``."""
        depth = getattr(self._local, "depth", 0)
        with self._cond:
            if self._writer == threading.get_ident():
                raise RuntimeError(
                    "a generation started inside a weight push (ReplicaSet.pushing) on the "
                    "same thread would wait for the push to end; generate after the block"
                )
            if depth == 0:  # a nested segment of this thread must not wait behind a push
                self._cond.wait_for(
                    lambda: self._aborting or (self._writer is None and self._waiting == 0)
                )
            if self._aborting:
                raise GenerationAborted(
                    "generation was aborted at a segment boundary: the rollout stream is "
                    "closing (the run ends or is preempted)"
                )
            self._segments += 1
        self._local.depth = depth + 1
        try:
            yield
        finally:
            self._local.depth = depth
            with self._cond:
                self._segments -= 1
                self._cond.notify_all()

    @contextmanager
    def aborting(self) -> Iterator[None]:
        """Inside the block no generation segment starts (``GenerationAborted``), so every
        generation stops once its segment in flight ends, on every replica; an engine call
        itself is never interrupted. Scoped, so that an engine used after the block (a
        test's shared engine) generates again."""
        with self._cond:
            self._aborting += 1
            self._cond.notify_all()  # segments waiting behind a push stop waiting
        try:
            yield
        finally:
            with self._cond:
                self._aborting -= 1

    @contextmanager
    def pushing(self) -> Iterator[None]:
        """A weight push: waits until no segment is in flight, holds new ones off."""
        if getattr(self._local, "depth", 0):
            raise RuntimeError(
                "a weight push from inside a generation segment would wait for that "
                "segment to end; push between generate calls"
            )
        me = threading.get_ident()
        with self._cond:
            if self._writer == me:
                self._depth += 1
            else:
                t0 = time.perf_counter()
                self._waiting += 1
                try:
                    self._cond.wait_for(lambda: self._writer is None and self._segments == 0)
                finally:
                    self._waiting -= 1
                    self._cond.notify_all()  # an interrupted wait lets segments go on
                self._writer, self._depth = me, 1
                self.wait_s += time.perf_counter() - t0
        try:
            yield
        finally:
            with self._cond:
                self._depth -= 1
                if self._depth == 0:
                    self._writer = None
                    self._cond.notify_all()


@dataclass
class _Sample:
    """One sample being generated: what it has so far and whether it is finished."""

    prompt: list[int]
    max_tokens: int
    max_len: int | None  # the engine's max_model_len: a longer prompt is refused
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    finish_reason: str = "length"
    replica: int = 0
    done: bool = False

    def extend(self, part: Completion, *, version: int, asked: int) -> None:
        """Appends a segment's tokens; finished on EOS, at its own max_tokens, or at the
        engine's ``max_model_len`` (stopped short of what was asked, or the prefix fills
        it: vLLM refuses a prompt that leaves no room for a token)."""
        self.token_ids += part.token_ids
        self.logprobs += part.logprobs
        self.versions += [version] * len(part.token_ids)
        self.texts.append(part.text)
        self.finish_reason = part.finish_reason
        short = len(part.token_ids) < asked
        full = self.max_len is not None and len(self.prompt) + len(self.token_ids) >= self.max_len
        self.done = part.finish_reason == "stop" or len(self.token_ids) >= self.max_tokens
        self.done = self.done or short or full

    def completion(self, decode: Callable[[list[int]], str] | None) -> Completion:
        """The whole completion; its text decoded whole when it took several segments and
        ``decode`` is given (a character split across segments decodes right only so)."""
        text = "".join(self.texts)
        if decode is not None and len(self.texts) > 1:
            text = decode(self.token_ids)
        return Completion(
            token_ids=self.token_ids,
            logprobs=self.logprobs,
            finish_reason=self.finish_reason,
            text=text,
            replica=self.replica,
            versions=self.versions,
        )


def tag_versions(groups: list[list[Completion]], version: int) -> None:
    """Every token of ``groups`` sampled by ``version`` (a generation in one segment)."""
    for completion in (c for group in groups for c in group):
        completion.versions = [version] * len(completion.token_ids)


def _asks(max_tokens: list[int], segment_tokens: int) -> tuple[int, tuple[int, ...] | None]:
    """``max_tokens`` and ``max_tokens_each`` of a segment whose prompts ask ``max_tokens``
    (each at most ``segment_tokens``); None when they all agree."""
    asked = [min(m, segment_tokens) for m in max_tokens]
    return max(asked, default=segment_tokens), tuple(asked) if len(set(asked)) > 1 else None


def generate_in_segments(
    call: Call,
    prompts: list[list[int]],
    settings: SamplingSettings,
    *,
    segment_tokens: int,
    segment: Callable[[], AbstractContextManager[None]],
    version: Callable[[], int],
    decode: Callable[[list[int]], str] | None = None,
    max_model_len: int | None = None,
) -> tuple[list[list[Completion]], int]:
    """``settings.group_size`` completions per prompt, generated ``segment_tokens`` at a
    time; each segment runs in ``segment()`` (the gate) and its tokens take ``version()``
    read there. Returns the groups and the number of segments. Greedy decoding continues
    one sample per prompt and copies it (every sample of a greedy group is the same).
    ``max_model_len``: the engines'; a sample whose prefix fills it is finished. A
    ``segment()`` that raises (``GenerationAborted``: the gate aborts) ends the call
    between segments, its samples' tokens dropped."""
    n = settings.group_size
    limits = settings.prompt_max_tokens(len(prompts))
    top, each = _asks(limits, segment_tokens)
    with segment():
        v = version()
        first = call(prompts, replace(settings, max_tokens=top, max_tokens_each=each))
    samples = []
    for i, group in enumerate(first):
        for part in group[: 1 if settings.is_greedy else n]:
            sample = _Sample(prompts[i], limits[i], max_model_len, replica=part.replica)
            sample.extend(part, version=v, asked=min(limits[i], segment_tokens))
            samples.append(sample)
    segments = 1
    running = [s for s in samples if not s.done]
    while running:
        remaining = [s.max_tokens - len(s.token_ids) for s in running]
        top, each = _asks(remaining, segment_tokens)
        seed = segment_seed(settings.seed, segments)
        step = replace(settings, group_size=1, seed=seed, max_tokens=top, max_tokens_each=each)
        with segment():
            v = version()
            parts = call([s.prompt + s.token_ids for s in running], step)
        for sample, (part,), rest in zip(running, parts, remaining, strict=True):
            sample.extend(part, version=v, asked=min(rest, segment_tokens))
        segments += 1
        running = [s for s in running if not s.done]
    done = [s.completion(decode) for s in samples]
    if settings.is_greedy:
        return [replicate(c, n) for c in done], segments
    return [done[i * n : (i + 1) * n] for i in range(len(prompts))], segments
