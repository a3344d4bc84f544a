"""The turns every episode shares (environments and the gateway): one engine call per batch
of turns whatever their max_tokens, seeded by its place in the rollout, and the two limits
with their stop reasons."""

from __future__ import annotations

import pytest

from grouprl.engines.base import SamplingSettings
from grouprl.rollout.turns import TurnEngine, TurnLimits
from grouprl.seeds import CALL_STRIDE, call_seed
from grouprl.types import Completion


class Engine:
    """Answers context c with token ids [c[0], k] (k: the call) and keeps each call."""

    weight_version = 0

    def __init__(self, fail_on: int | None = None) -> None:
        self.calls: list[tuple[list[list[int]], SamplingSettings]] = []
        self.fail_on = fail_on

    def generate(self, prompts, settings):
        if len(self.calls) == self.fail_on:
            raise RuntimeError("engine down")
        k = len(self.calls)
        self.calls.append((prompts, settings))
        return [[Completion([p[0], k], [0.0, 0.0], "stop")] * settings.group_size for p in prompts]


def test_one_engine_call_whatever_the_max_tokens_each_with_the_next_seed():
    engine = Engine()
    turns = TurnEngine(engine, SamplingSettings(group_size=1, max_tokens=32, seed=5))
    out = turns.generate([[1], [2], [3], [4]], max_tokens=[8, 32, 8, 4])
    assert [[c.token_ids for c in group] for group in out] == [
        [[1, 0]],
        [[2, 0]],
        [[3, 0]],
        [[4, 0]],
    ]
    [(prompts, settings)] = engine.calls
    assert prompts == [[1], [2], [3], [4]]
    assert (settings.max_tokens, settings.max_tokens_each, settings.seed) == (32, (8, 32, 8, 4), 5)
    assert settings.prompt_max_tokens(4) == [8, 32, 8, 4]
    turns.generate([[9]])  # the run's max_tokens; the second call of the rollout
    assert engine.calls[-1][1] == SamplingSettings(max_tokens=32, seed=5 + CALL_STRIDE)
    turns.generate([[9], [8]], max_tokens=[6, 6])  # agreeing values: as for one max_tokens
    assert engine.calls[-1][1] == SamplingSettings(max_tokens=6, seed=5 + 2 * CALL_STRIDE)
    assert engine.calls[-1][1].prompt_max_tokens(2) == [6, 6]
    assert turns.calls == 3


def test_first_turns_sample_n_per_prompt_with_the_run_seed_and_no_seed_stays_none():
    engine = Engine()
    settings = SamplingSettings(group_size=3, temperature=0.7, max_tokens=16, seed=11)
    groups = TurnEngine(engine, settings).generate([[1], [2]], group_size=3)
    assert [len(g) for g in groups] == [3, 3] and engine.calls[0][1] == settings
    assert call_seed(None, 4) is None and call_seed(11, 0) == 11
    unseeded = Engine()
    turns = TurnEngine(unseeded, SamplingSettings(seed=None))
    turns.generate([[1]])
    turns.generate([[1]])
    assert [s.seed for _, s in unseeded.calls] == [None, None]


def test_a_failed_call_raises_and_does_not_take_a_seed():
    engine = Engine(fail_on=1)
    turns = TurnEngine(engine, SamplingSettings(max_tokens=8, seed=0))
    turns.generate([[1], [2]], max_tokens=[8, 4])
    with pytest.raises(RuntimeError, match="engine down"):
        turns.generate([[3]])
    assert turns.calls == 1  # the call that answered counts; the next call reuses seed 1
    engine.fail_on = None
    turns.generate([[3]])
    assert engine.calls[-1][1].seed == CALL_STRIDE


def test_turn_limit_ends_the_episode_at_max_turns():
    limits = TurnLimits(max_turns=2, max_model_len=100, max_tokens=10, whole_turns=True)
    assert limits.turn_limit(1) is None
    hit = limits.turn_limit(2)
    assert hit.stop_reason == "max_turns"
    assert hit.message == "the episode made its 2 model calls (env.max_turns)"


def test_environments_need_room_for_a_whole_turn_the_gateway_for_one_token():
    whole = TurnLimits(max_turns=4, max_model_len=100, max_tokens=10, whole_turns=True)
    assert whole.context_limit(90) is None
    assert whole.context_limit(91).stop_reason == "context_overflow"
    shrink = TurnLimits(max_turns=4, max_model_len=100, max_tokens=10, whole_turns=False)
    assert shrink.context_limit(99) is None
    hit = shrink.context_limit(100)
    assert (hit.stop_reason, hit.message) == (
        "context_overflow",
        "the context is 100 tokens, which leaves no room for a completion in "
        "rollout.max_model_len=100",
    )
    # a gateway turn gets the room left, and no more than the call asked for
    assert [shrink.turn_tokens(n) for n in (50, 95, 99)] == [10, 5, 1]
    assert shrink.turn_tokens(50, asked=3) == 3 and shrink.turn_tokens(95, asked=8) == 5
