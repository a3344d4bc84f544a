"""Scoring as groups finish (rollout.max_staleness >= 1): each group is scored, and asked
of the distillation teacher, while the engine still generates the others; the scores
come back in prompt order, and a failure is its group's alone. The engine here hands out
a group only once the group before it has been scored, so a rollout that scored after
the whole generation would never end."""

from __future__ import annotations

import threading

import pytest

from grouprl.engines.base import SamplingSettings
from grouprl.engines.placement import in_driver
from grouprl.envs.single_turn import SingleTurnEnv
from grouprl.rewards.failures import RewardFailure
from grouprl.rewards.scores import RewardScores
from grouprl.rollout.episode_scores import GroupScoring, TimedScore
from grouprl.rollout.episodes import run_episodes
from grouprl.rollout.reward import SampleFailed
from grouprl.rollout.teacher_scores import TimedTeacher
from grouprl.types import Completion

WAIT_S = 10.0


class SteppedEngine:
    """Streams groups (``streams_groups``): prompt [p]'s group, then waits until it has
    been scored (``scored[p]``) before it finishes the next one."""

    streams_groups = True
    weight_version = 0

    def __init__(self, prompts: int) -> None:
        self.scored = [threading.Event() for _ in range(prompts)]
        self.waits: list[bool] = []

    def generate(self, prompts, settings, on_group=None):
        groups = []
        for i, prompt in enumerate(prompts):
            group = [
                Completion([prompt[0], j], [-0.5, -0.5], "stop", text=f"{prompt[0]}-{j}")
                for j in range(settings.group_size)
            ]
            groups.append(group)
            if on_group is not None:
                on_group(i, group)
                self.waits.append(self.scored[prompt[0]].wait(WAIT_S))
        return groups


class Scorer:
    """A reward of 1 for the completions of prompt 3's group, else 0; prompt 7's call fails
    (as ``RewardScorer`` reports a failed call: its samples in ``errors``)."""

    reads_prompts = False

    def __init__(self, engine: SteppedEngine) -> None:
        self.engine, self.calls = engine, []

    def __call__(self, *, completions, rows, group_size):
        first = rows[0]["_index"]
        self.calls.append(first)
        self.engine.scored[first].set()
        values = [1.0 if first == 3 else 0.0] * len(completions)
        scores = RewardScores(total=values, parts={"judge": list(values)})
        if first == 7:
            scores.errors = [
                RewardFailure("judge", 0, 7, "ValueError", "the judge answered garbage", samples=2)
            ]
        return scores

    def close(self) -> None:
        pass


def _rollout(engine: SteppedEngine, scorer, *, prompts: list[int], on_error="drop", teacher=None):
    groups = GroupScoring(
        score=scorer, correct_function="judge", on_error=on_error, teacher=teacher
    )
    try:
        trajectories = run_episodes(
            engine=in_driver(engine),  # type: ignore[arg-type]
            env=SingleTurnEnv(prompt_key="q", system_prompt=None, prompt_template="{question}"),
            tokenizer=None,
            rows=[{"q": str(p), "_index": p} for p in prompts],
            prompts=[[p] for p in prompts],
            settings=SamplingSettings(group_size=2, max_tokens=4, seed=0),
            max_turns=1,
            max_model_len=64,
            on_group_done=groups.submit,
        )
        return trajectories, groups.result()
    finally:
        groups.close()


def test_each_group_is_scored_while_the_engine_generates_the_next():
    engine = SteppedEngine(5)
    scorer = TimedScore(Scorer(engine))  # type: ignore[arg-type]
    trajectories, scores = _rollout(engine, scorer, prompts=[0, 1, 2, 3, 4])
    assert engine.waits == [True] * 5  # every group was scored before the next finished
    assert scorer.fn.calls == [0, 1, 2, 3, 4]  # type: ignore[attr-defined]
    assert [t.prompt_index for t in trajectories] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert [t.completion.text for t in trajectories[6:8]] == ["3-0", "3-1"]
    assert scores.total == [0.0] * 6 + [1.0, 1.0] + [0.0] * 2  # prompt order
    assert [t.correct for t in trajectories] == [False] * 6 + [True, True] + [False] * 2
    assert all(t.stop_reason == "answered" for t in trajectories)
    assert scorer.seconds >= 0 and scorer.hidden >= 0


def test_a_failed_group_fails_alone_and_raise_stops_the_round():
    engine = SteppedEngine(9)
    trajectories, _ = _rollout(engine, Scorer(engine), prompts=[6, 7, 8])
    assert engine.waits == [True] * 3
    assert [t.trains for t in trajectories] == [True, True, False, False, True, True]
    assert "the judge answered garbage" in (trajectories[2].reward_parts.error or "")
    engine = SteppedEngine(9)
    with pytest.raises(SampleFailed):
        _rollout(engine, Scorer(engine), prompts=[6, 7, 8], on_error="raise")


class Teacher:
    """Logprob -0.1 x the prompt of every token after it; prompt 2's call fails. Records
    the prompts of each call, and whether the group had been scored by then."""

    def __init__(self, engine: SteppedEngine) -> None:
        self.engine, self.calls = engine, []

    def token_logprobs(self, ids, starts):
        first = ids[0][0]
        self.calls.append((first, self.engine.scored[first].is_set()))
        if first == 2:
            raise TimeoutError("the teacher did not answer")
        return [[-0.1 * first] * (len(seq) - start) for seq, start in zip(ids, starts, strict=True)]


def test_the_teacher_is_asked_for_each_group_as_it_is_scored_and_once():
    """Each group is asked of the teacher on the scoring thread, after its scores and
    before the engine finishes the next group; a teacher call that fails fails its group
    alone (reward_error, with the samples' indices in the round); asking the round again
    (as ``driver/rollouts`` does for what the stream did not hand out) asks nothing, and
    nothing is asked while the teacher is held (validation)."""
    engine = SteppedEngine(4)
    teacher = TimedTeacher(Teacher(engine), on_error="drop", top_k=0)  # type: ignore[arg-type]
    trajectories, _ = _rollout(engine, Scorer(engine), prompts=[0, 1, 2, 3], teacher=teacher)
    assert engine.waits == [True] * 4
    assert teacher.engines.calls == [(0, True), (1, True), (2, True), (3, True)]  # type: ignore[attr-defined]
    assert [t.teacher_logprobs for t in trajectories[6:8]] == [pytest.approx([-0.3, -0.3])] * 2
    assert [t.trains for t in trajectories] == [True] * 4 + [False] * 2 + [True] * 2
    assert "the teacher did not answer" in (trajectories[5].reward_parts.error or "")
    assert 0 <= teacher.hidden <= teacher.seconds
    teacher(trajectories, group_size=2)
    assert len(teacher.engines.calls) == 4  # type: ignore[attr-defined]
    trajectories[0].teacher_logprobs = None
    with teacher.held():  # validation's episodes
        assert teacher(trajectories, group_size=2) == 0.0
    assert len(teacher.engines.calls) == 4  # type: ignore[attr-defined]
    engine = SteppedEngine(4)
    teacher = TimedTeacher(Teacher(engine), on_error="raise", top_k=0)  # type: ignore[arg-type]
    with pytest.raises(SampleFailed, match=r"sample 4 \(prompt index 2\)"):
        _rollout(engine, Scorer(engine), prompts=[0, 1, 2, 3], teacher=teacher)
