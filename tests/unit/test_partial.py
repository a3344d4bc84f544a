"""Partial rollouts (engines/segments.py, ReplicaSet): a weight push waits for the
generation segment in flight and holds new ones off; a generation interrupted by a push
continues from its prefix with the new weights, each token tagged with the version that
sampled it; without segments a generation is exactly today's; the training batch and
multi-turn episodes carry the per-token versions.

Pinned choices: segment 0 draws what an unsegmented generation draws (same seeds, lower
max_tokens); continuation segment s is seeded seed + (s << SEGMENT_SHIFT); a greedy group
continues one sample and copies it; a segment the engine stops short (max_model_len)
finishes its sample; a trajectory's weight_version is its first token's (oldest) version.
"""

from __future__ import annotations

import copy
import threading
import time
from contextlib import nullcontext
from dataclasses import replace
from typing import ClassVar

import pytest
import torch

from fake_engines import FakeEngine, replica_set
from grouprl.driver.batch import build_batch
from grouprl.engines.base import SamplingSettings
from grouprl.engines.placement import in_driver
from grouprl.engines.replicas import ReplicaSet
from grouprl.engines.segments import PushGate
from grouprl.envs.base import Step
from grouprl.rollout.episodes import run_episodes
from grouprl.seeds import SEGMENT_SHIFT
from grouprl.types import Completion, Trajectory, Turn

LOGPROB_TOL = 5e-4
"""Engine vs a plain forward pass, float32 (as tests/integration/test_engines.py)."""
SETTINGS = SamplingSettings(group_size=2, temperature=1.0, max_tokens=24, seed=3)


# --- the push gate ---------------------------------------------------------------------------


def _wait_until(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.002)


def test_a_push_waits_for_the_segment_in_flight_and_holds_new_segments_off():
    gate, order = PushGate(), []
    in_segment, release = threading.Event(), threading.Event()

    def generation() -> None:
        with gate.segment():
            in_segment.set()
            release.wait(5)
            order.append("segment 0 ends")

    def push() -> None:
        with gate.pushing():
            order.append("push")
            time.sleep(0.05)  # a segment that asks now must wait for the push to end
            order.append("push ends")

    def later_segment() -> None:
        with gate.segment():
            order.append("segment 1")

    threads = [threading.Thread(target=generation)]
    threads[0].start()
    in_segment.wait(5)
    threads.append(threading.Thread(target=push))
    threads[1].start()
    _wait_until(lambda: gate.pushes_waiting == 1)
    # a segment asking while the push waits goes after it (writer-preferring)
    threads.append(threading.Thread(target=later_segment))
    threads[2].start()
    time.sleep(0.05)
    assert order == []  # the push waits for segment 0, segment 1 waits for the push
    release.set()
    for t in threads:
        t.join(5)
    assert order == ["segment 0 ends", "push", "push ends", "segment 1"]
    assert gate.pushes_waiting == 0 and gate.wait_s > 0.04


def test_a_push_inside_a_segment_or_a_segment_inside_a_push_raises_not_hangs():
    gate = PushGate()
    with (
        gate.segment(),
        pytest.raises(RuntimeError, match="push from inside a generation"),
        gate.pushing(),
    ):
        pass
    with gate.pushing():
        with gate.pushing():  # nested pushes of one thread: update_weights inside pushing()
            pass
        with (
            pytest.raises(RuntimeError, match="generation started inside a weight push"),
            gate.segment(),
        ):
            pass
    with gate.segment():  # the gate is free again
        pass


# --- segmenting, with a scripted engine ------------------------------------------------------


class Counting(FakeEngine):
    """Continues a prompt [target, ...] with tokens seed * 1000 + position until the
    sequence reaches ``target`` tokens (then "stop": the last token is the end), or
    ``max_model_len`` (then it stops short, "length"). Keeps each call's settings."""

    def __init__(self, max_model_len: int = 1000) -> None:
        super().__init__()
        self.max_model_len = max_model_len

    def generate(self, prompts, settings):
        self.calls.append((prompts, settings))
        limits = settings.prompt_max_tokens(len(prompts))
        out = []
        for i, prompt in enumerate(prompts):
            group = []
            for j in range(settings.group_size):
                seed = settings.seed + i * settings.group_size + j
                room = min(limits[i], prompt[0] - len(prompt), self.max_model_len - len(prompt))
                tokens = [seed * 1000 + len(prompt) + t for t in range(room)]
                stop = len(prompt) + room == prompt[0]
                group.append(
                    Completion(tokens, [-0.5] * room, "stop" if stop else "length", text="x" * room)
                )
            out.append(group)
        return out


PROMPTS = [[9, 1, 1], [30, 1], [12, 1, 1, 1], [40]]  # ends: 6, 28, 8, 39 tokens (or max)


def test_segments_continue_each_sample_with_its_own_seed_and_max_tokens():
    engine = Counting()
    settings = SamplingSettings(group_size=2, seed=100, max_tokens=20)
    groups = replica_set([engine], segment_tokens=8).generate(PROMPTS, settings)
    lengths = [[len(c.token_ids) for c in g] for g in groups]
    assert lengths == [[6, 6], [20, 20], [8, 8], [20, 20]]
    assert [g[0].finish_reason for g in groups] == ["stop", "length", "stop", "length"]
    # segment 0 is the call as it would be, at most 8 tokens each; then only the unfinished
    # samples (prompts 1 and 3: 4 samples) go on, each as its own prompt with its prefix
    (p0, s0), (p1, s1), (p2, s2) = engine.calls
    assert p0 == PROMPTS and (s0.seed, s0.group_size, s0.max_tokens) == (100, 2, 8)
    assert s0.max_tokens_each is None
    assert p1 == [PROMPTS[i] + groups[i][j].token_ids[:8] for i in (1, 3) for j in (0, 1)]
    assert p2 == [PROMPTS[i] + groups[i][j].token_ids[:16] for i in (1, 3) for j in (0, 1)]
    assert (s1.seed, s1.group_size, s1.max_tokens) == (100 + (1 << SEGMENT_SHIFT), 1, 8)
    assert s2.seed == 100 + (2 << SEGMENT_SHIFT) and s2.max_tokens == 4  # 20 - 16 left
    # sample (1, 1) drew its first 8 tokens with seed 100 + 3, then 100 + stride + 1
    assert groups[1][1].token_ids[0] // 1000 == 103
    assert groups[1][1].token_ids[8] // 1000 == 100 + (1 << SEGMENT_SHIFT) + 1
    assert all(c.versions == [0] * len(c.token_ids) for g in groups for c in g)


def test_segments_do_not_depend_on_the_replicas_and_decode_a_multi_segment_text_whole():
    settings = SamplingSettings(group_size=2, seed=100, max_tokens=20)
    one = replica_set([Counting()], segment_tokens=8).generate(PROMPTS, settings)
    three = replica_set([Counting(), Counting(), Counting()], segment_tokens=8).generate(
        PROMPTS, settings
    )
    assert [[c.token_ids for c in g] for g in three] == [[c.token_ids for c in g] for g in one]
    decoded = replica_set(
        [Counting()], segment_tokens=8, decode=lambda ids: f"{len(ids)} ids"
    ).generate(PROMPTS, settings)
    assert [g[0].text for g in decoded] == ["xxxxxx", "20 ids", "xxxxxxxx", "20 ids"]


def test_a_segment_the_engine_stops_short_finishes_its_sample():
    engine = Counting(max_model_len=14)  # prompt 3 ([40]) can grow to 14 tokens only
    groups = replica_set([engine], segment_tokens=8).generate(
        [[40]], SamplingSettings(max_tokens=20, seed=1)
    )
    assert len(groups[0][0].token_ids) == 13 and groups[0][0].finish_reason == "length"
    assert len(engine.calls) == 2  # not asked again for tokens it cannot give
    # a prefix that fills max_model_len is not sent again (vLLM refuses such a prompt)
    engine = Counting(max_model_len=9)
    replicas = replica_set([engine], segment_tokens=8)
    replicas.max_model_len = 9
    groups = replicas.generate([[40]], SamplingSettings(max_tokens=20, seed=1))
    assert len(groups[0][0].token_ids) == 8 and len(engine.calls) == 1


# --- the tiny model with the hf engine -------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def new_model(model):
    """The policy after an update: every weight moved by 10% of its spread (seeded)."""
    moved = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in moved.parameters():
            p += 0.1 * p.std().nan_to_num() * torch.randn(p.shape, generator=gen)
    return moved


@pytest.fixture(scope="module")
def prompts(tokenizer) -> list[list[int]]:
    questions = ["3 + 4", "12 + 5", "7 * 9 - 2"]
    return [
        tokenizer(
            tokenizer.apply_chat_template(
                [{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False
            ),
            add_special_tokens=False,
        ).input_ids
        for q in questions
    ]


def _engine(model, tokenizer):
    from grouprl.engines.hf_engine import HFEngine

    return HFEngine(model, tokenizer, device="cpu")


@torch.no_grad()
def _score(model, prompt: list[int], tokens: list[int]) -> list[float]:
    """log_softmax(logits) of each of ``tokens`` after ``prompt`` (temperature 1)."""
    ids = torch.tensor([prompt + tokens])
    logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    return logits.log_softmax(-1).gather(1, torch.tensor(tokens)[:, None])[:, 0].tolist()


class PushAfterFirstSegment:
    """The hf engine, and a weight push (``weights`` as version 1) that a thread starts
    during the first segment: the segment returns only once the push waits at the gate,
    so the push lands exactly between segments 0 and 1."""

    def __init__(self, engine, weights) -> None:
        self.engine, self.weights, self.replicas = engine, weights, None
        self.segments: list[list[list[Completion]]] = []
        self.pusher: threading.Thread | None = None

    @property
    def weight_version(self) -> int:
        return self.engine.weight_version

    def generate(self, prompts, settings):
        groups = self.engine.generate(prompts, settings)
        self.segments.append(copy.deepcopy(groups))
        if self.pusher is None:
            replicas = self.replicas
            self.pusher = threading.Thread(
                target=lambda: replicas.update_weights(self.weights.items(), version=1)
            )
            self.pusher.start()
            _wait_until(lambda: replicas.pushes_waiting == 1)
        return groups

    def update_weights(self, named_tensors, *, version):
        self.engine.update_weights(named_tensors, version=version)

    def released(self):
        return nullcontext()

    def close(self):
        pass


@pytest.mark.slow  # the tiny model generating: left out of make test-fast
def test_an_interrupted_generation_continues_from_its_prefix_with_the_new_weights(
    model, new_model, tokenizer, prompts
):
    weights = {n: p.detach().clone() for n, p in new_model.named_parameters()}
    engine = PushAfterFirstSegment(_engine(model, tokenizer), weights)
    replicas = engine.replicas = in_driver(engine, segment_tokens=6)
    groups = replicas.generate(prompts, SETTINGS)
    engine.pusher.join(5)
    assert replicas.weight_version == 1 and len(engine.segments) >= 2
    completions = [c for g in groups for c in g]
    firsts = [c for g in engine.segments[0] for c in g]
    spanning = 0
    stale_gaps = []  # how far the old weights are from the continued tokens' logprobs
    for c, first, prompt in zip(
        completions, firsts, [p for p in prompts for _ in "ab"], strict=True
    ):
        s = len(first.token_ids)
        assert c.token_ids[:s] == first.token_ids  # continued from its prefix
        assert c.versions == [0] * s + [1] * (len(c.token_ids) - s)
        old_lp, new_lp = _score(model, prompt, c.token_ids), _score(new_model, prompt, c.token_ids)
        torch.testing.assert_close(c.logprobs[:s], old_lp[:s], atol=LOGPROB_TOL, rtol=0)
        if len(c.token_ids) > s:
            spanning += 1
            torch.testing.assert_close(c.logprobs[s:], new_lp[s:], atol=LOGPROB_TOL, rtol=0)
            stale_gaps += [abs(a - b) for a, b in zip(c.logprobs[s:], old_lp[s:], strict=True)]
        assert c.text == tokenizer.decode(c.token_ids, skip_special_tokens=True)
    assert spanning >= 4, "too few samples outlived their first segment"
    assert max(stale_gaps) > 50 * LOGPROB_TOL  # the old weights would not have passed
    metrics = replicas.drain_metrics()
    assert metrics["rollout/spanning_samples"] == spanning
    assert metrics["rollout/segments"] == len(engine.segments)
    # the batch carries both versions on the generated tokens, -1 elsewhere
    trajectories = [
        Trajectory(i // 2, prompts[i // 2], [Turn(c)], weight_version=c.versions[0])
        for i, c in enumerate(completions)
    ]
    batch = build_batch(trajectories, pad_id=tokenizer.pad_token_id)
    generated = batch.loss_mask_BT.bool()
    assert set(batch.version_BT[generated].tolist()) == {0, 1}
    assert (batch.version_BT[~generated] == -1).all()
    assert batch.version_BT[generated].tolist() == [v for c in completions for v in c.versions]


@pytest.fixture(scope="module")
def today(model, tokenizer, prompts) -> list[list[Completion]]:
    """What the hf engine generates for ``prompts`` without a replica set."""
    return _engine(model, tokenizer).generate(prompts, SETTINGS)


@pytest.mark.slow  # the tiny model generating: left out of make test-fast
def test_without_segments_a_generation_is_todays_plus_its_versions(
    model, tokenizer, prompts, today
):
    groups = in_driver(_engine(model, tokenizer)).generate(prompts, SETTINGS)
    for g in groups:
        for c in g:
            assert c.versions == [0] * len(c.token_ids)
            c.versions = []
    assert groups == today


@pytest.mark.slow  # the tiny model generating: left out of make test-fast
def test_segment_zero_draws_todays_first_tokens_and_greedy_and_ignore_eos_still_hold(
    model, tokenizer, prompts, today
):
    segmented = in_driver(_engine(model, tokenizer), segment_tokens=5)
    groups = segmented.generate(prompts, SETTINGS)
    for g_today, g in zip(today, groups, strict=True):
        for a, b in zip(g_today, g, strict=True):
            assert b.token_ids[:5] == a.token_ids[:5]
            assert b.finish_reason == "stop" or len(b.token_ids) == SETTINGS.max_tokens
    greedy = replace(SETTINGS, temperature=0.0, group_size=3, max_tokens=10)
    plain = _engine(model, tokenizer).generate(prompts[:2], greedy)
    copies = segmented.generate(prompts[:2], greedy)
    assert [[c.token_ids for c in g] for g in copies] == [[c.token_ids for c in g] for g in plain]
    assert copies[0][0].token_ids is not copies[0][1].token_ids  # independent copies
    long = segmented.generate(prompts[:1], replace(SETTINGS, ignore_eos=True, max_tokens=8))
    assert [len(c.token_ids) for c in long[0]] == [8, 8]
    assert {c.finish_reason for c in long[0]} == {"length"}


# --- multi-turn episodes ------------------------------------------------------------------


class TwoTurns:
    """A tool reply after the first turn; the episode ends after the second."""

    def __init__(self, row) -> None:
        self.row, self.turns = row, 0

    def start(self):
        return [{"role": "user", "content": self.row["question"]}]

    def step(self, model_text):
        self.turns += 1
        if self.turns == 2:
            return Step(messages=[], done=True, stop_reason="answered")
        return Step(messages=[{"role": "tool", "content": "result: 5"}])


class TwoTurnEnv:
    template_kwargs: ClassVar[dict] = {}

    def episode(self, row):
        return TwoTurns(row)


class PushBetweenTurns:
    """The replica set as an episode's engine; pushes ``weights`` as version 1 after the
    first turns."""

    def __init__(self, replicas: ReplicaSet, weights) -> None:
        self.replicas, self.weights = replicas, weights

    @property
    def weight_version(self) -> int:
        return self.replicas.weight_version

    def generate(self, prompts, settings):
        groups = self.replicas.generate(prompts, settings)
        if self.replicas.weight_version == 0:
            with self.replicas.pushing():  # as the driver pushes
                self.replicas.update_weights(self.weights.items(), version=1)
        return groups


@pytest.mark.slow  # the tiny model generating: left out of make test-fast
def test_an_episodes_turn_after_a_push_carries_the_new_version(model, new_model, tokenizer):
    weights = {n: p.detach().clone() for n, p in new_model.named_parameters()}
    engine = PushBetweenTurns(in_driver(_engine(model, tokenizer)), weights)
    trajectories = run_episodes(
        engine=engine,
        env=TwoTurnEnv(),
        tokenizer=tokenizer,
        rows=[{"_index": i, "question": f"What is {i} plus 2?"} for i in range(2)],
        settings=replace(SETTINGS, max_tokens=24),
        max_turns=2,
        max_model_len=512,
    )
    two = [t for t in trajectories if len(t.turns) == 2]
    assert two, [t.stop_reason for t in trajectories]
    for traj in two:
        first, second = (turn.completion for turn in traj.turns)
        assert first.versions == [0] * len(first.token_ids)
        assert second.versions == [1] * len(second.token_ids)
        assert traj.weight_version == 0  # the oldest: what its staleness counts from
    batch = build_batch(two, pad_id=tokenizer.pad_token_id)
    for b in range(len(two)):
        turn_BT = batch.turn_index_BT[b]
        assert set(batch.version_BT[b][turn_BT == 0].tolist()) == {0}
        assert set(batch.version_BT[b][turn_BT == 1].tolist()) == {1}


def test_the_batch_takes_the_trajectorys_version_for_untagged_tokens_and_checks_lengths():
    tagged = Completion([5, 6, 7], [0.0] * 3, "stop", versions=[2, 2, 3])
    untagged = Completion([8, 9], [0.0] * 2, "stop")
    trajectories = [
        Trajectory(0, [1, 2], [Turn(tagged)], 2),
        Trajectory(1, [1], [Turn(untagged)], 4),
    ]
    batch = build_batch(trajectories, pad_id=0)
    assert batch.version_BT.tolist() == [[-1, -1, 2, 2, 3], [-1, 4, 4, -1, -1]]
    bad = Completion([5, 6], [0.0] * 2, "stop", versions=[1])
    with pytest.raises(ValueError, match="1 weight versions for 2 tokens"):
        build_batch([Trajectory(7, [1], [Turn(bad)], 1)], pad_id=0)
