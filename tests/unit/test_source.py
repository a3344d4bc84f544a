"""The inline rollout source (driver/source.py, rollout.max_staleness=0): a step's rounds
run as the synchronous loop ran them: B rows a round from the sampler, seeded (step - 1,
round within the step), kept groups first in order, groups kept past the batch let go,
and after max_rounds rounds the batch filled with the step's evicted groups in order."""

from __future__ import annotations

from grouprl.data.sampler import PromptSampler
from grouprl.driver.source import Generated, RolloutSource
from grouprl.types import Completion, Trajectory, Turn

B = 2


class Rounds:
    """A fake generate: one sample per prompt, kept where ``keep(row)``."""

    def __init__(self, keep) -> None:
        self.keep = keep
        self.calls: list[tuple[list[int], int, int]] = []

    def __call__(self, rows: list[int], index: int, attempt: int = 0) -> Generated:
        self.calls.append((rows, index, attempt))
        groups = [[_sample(row, version=index)] for row in rows]
        return Generated(groups, [self.keep(row) for row in rows], info=(index, attempt))


def _sample(row: int, *, version: int) -> Trajectory:
    return Trajectory(row, [1], [Turn(Completion([row], [-0.5], "stop"))], weight_version=version)


def _source(rounds: Rounds, max_rounds: int = 3) -> RolloutSource:
    sampler = PromptSampler(40, seed=0, shuffle=False)
    return RolloutSource(rounds, sampler, batch_size=B, max_rounds=max_rounds)


def _rows(taken) -> list[int]:
    return [t.prompt_index for t in taken.trajectories]


def test_a_step_takes_rounds_until_its_batch_is_kept_seeded_by_step_and_round():
    rounds = Rounds(keep=lambda row: row % 3 == 0)
    source = _source(rounds)
    first, second = source.take(0), source.take(1)
    assert _rows(first) == [0, 3] and _rows(second) == [6, 9]
    assert rounds.calls == [
        ([0, 1], 0, 0),
        ([2, 3], 0, 1),
        ([4, 5], 1, 0),
        ([6, 7], 1, 1),
        ([8, 9], 1, 2),
    ]
    assert first.rounds == [(0, 0), (0, 1)] and (first.metrics, first.filled) == ({}, 0)
    assert source.state_dict() is None  # the sampler (RunState's) is the whole state


def test_groups_kept_past_the_batch_are_let_go_and_the_next_step_starts_afresh():
    rounds = Rounds(keep=lambda row: row != 1)
    source = _source(rounds)
    assert _rows(source.take(0)) == [0, 2]  # row 3, kept past the batch, is let go
    assert _rows(source.take(1)) == [4, 5]
    assert rounds.calls[-1] == ([4, 5], 1, 0)


def test_a_batch_without_signal_is_filled_with_the_steps_evicted_groups_in_order():
    rounds = Rounds(keep=lambda row: row == 2)
    source = _source(rounds, max_rounds=2)
    taken = source.take(0)
    assert _rows(taken) == [2, 0] and taken.filled == 1
    assert [call[1:] for call in rounds.calls] == [(0, 0), (0, 1)]
