"""The seed streams of a run (grouprl/seeds.py) never collide within the bounds its
docstring states, round 0 and segment 0 draw what they always drew, and rounds and
segments >= 1 live above every seed the low part reaches."""

from __future__ import annotations

from grouprl.seeds import (
    CALL_STRIDE,
    MODULUS,
    STEP_STRIDE,
    call_seed,
    request_seed,
    segment_seed,
    step_seed,
)

GROUP = 8  # samples per prompt


def _old_step_seed(seed: int, step: int, round_: int = 0) -> int:
    """The rule before grouprl/seeds.py (driver/loop.sampling_seed)."""
    return ((seed * 1_000_003 + step) * 100_000 + round_ * 10_000_019) % (2**31 - 1)


def _seeds(run_seed: int, step: int, round_: int, segment: int, call: int) -> list[int]:
    """Every sample's seed of one engine call (or one continuation segment of it): as many
    samples as the bounds allow after ``call`` calls (samples < CALL_STRIDE, calls x
    CALL_STRIDE + samples < STEP_STRIDE), GROUP per prompt."""
    samples = min(CALL_STRIDE - 1, STEP_STRIDE - 1 - call * CALL_STRIDE)
    base = segment_seed(call_seed(step_seed(run_seed, step, round_), call), segment)
    return [
        request_seed(base, i, GROUP, j)
        for i in range(samples // GROUP + 1)
        for j in range(GROUP)
        if i * GROUP + j <= samples
    ]


def test_no_two_samples_of_a_run_share_a_seed_within_the_bounds():
    """Steps 1, 2, 3 and 21_474 (the farthest apart the bound allows), rounds and segments
    0..2, calls 0, 1, 11 and 12 (the last whole call), every sample the bounds allow."""
    for run_seed in (0, 42):
        seen: dict[int, tuple] = {}
        for step in (1, 2, 3, (MODULUS // STEP_STRIDE)):
            for round_ in range(3):
                for segment in range(3):
                    for call in (0, 1, 11, 12):
                        where = (step, round_, segment, call)
                        for seed in _seeds(run_seed, step, round_, segment, call):
                            assert seed not in seen, f"{where} meets {seen[seed]}: {seed}"
                            seen[seed] = where
        assert len(seen) > 400_000


def test_rounds_and_segments_past_the_first_never_meet_round_0_segment_0():
    low = {s for step in (1, 2, 3) for s in _seeds(7, step, 0, 0, 0)}
    assert max(low) < 2**32
    for round_, segment in ((1, 0), (0, 1), (1, 1), (2, 3)):
        high = _seeds(7, 1, round_, segment, 0)
        assert min(high) >= 2**32 and max(high) < 2**63 and not low & set(high)


def test_round_0_draws_what_it_always_drew_and_the_old_rounds_collided():
    """Round 0 (every run without dynamic sampling's extra rounds) keeps its seeds bit for
    bit; the old rule put step s's round 1 on step s + 100's sample 19 of round 0."""
    for seed, step in ((0, 1), (42, 3), (1234, 10_000)):
        assert step_seed(seed, step) == _old_step_seed(seed, step)
    assert _old_step_seed(42, 5, 1) == _old_step_seed(42, 105) + 19
    assert step_seed(42, 5, 1) != step_seed(42, 105) + 19


def test_the_streams_below_a_request_are_those_the_engines_always_used():
    """Call k adds k x 7919, prompt i of n samples adds i x n, sample j adds j; no seed
    (None) stays None at every level."""
    assert call_seed(100, 3) == 100 + 3 * 7919
    assert request_seed(100, 2, 4) == 108 and request_seed(100, 2, 4, 3) == 111
    assert segment_seed(100, 0) == 100
    assert call_seed(None, 1) is segment_seed(None, 1) is request_seed(None, 1, 2) is None
