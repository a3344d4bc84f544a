"""Scoring episodes and timing the reward functions.

    trajectories (P*G, prompt-major) ─► reward functions on each last turn ─► RewardScores
                    ├─► Trajectory.reward_parts (scores, functions, turns, extras), correct
                    │   (and Trajectory.reward, from the parts: rollout/reward.py)
                    └─► each sample a RewardScores error covers: fail(reward_error),
                        dropped or trained as 0 (reward.on_error)

Episodes, single- and multi-turn, run in ``rollout.episodes``; ``score_trajectories``
scores them all (the outcome reward functions read the last turn).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from grouprl.config.containment import OnError
from grouprl.rewards.declares import ReadsPrompts
from grouprl.rewards.scoring import RewardScorer, RewardScores
from grouprl.rollout.reward import fail, record_parts
from grouprl.rollout.teacher_scores import TimedTeacher
from grouprl.types import Trajectory, sequence_ids

ScoreFn = Callable[..., RewardScores]
"""``score(completions=..., rows=..., group_size=G) -> RewardScores`` (``RewardScorer``):
samples prompt-major, ``G`` per prompt (group rewards score each prompt's group); one
whose ``reads_prompts`` is true is also given ``prompt_ids=`` (what the policy saw)."""


class TimedScore:
    """The run's scorer, adding up the seconds spent in it (``seconds``, resettable) and
    how many of them ran while the round still generated (``hidden``: scored as groups
    finish, ``GroupScoring``); ``close()`` closes its workers."""

    def __init__(self, fn: RewardScorer) -> None:
        self.fn, self.seconds, self.hidden = fn, 0.0, 0.0

    @property
    def reads_prompts(self) -> bool:
        return self.fn.reads_prompts

    def __call__(self, *args, **kwargs) -> RewardScores:
        t0 = time.perf_counter()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - t0

    def close(self) -> None:
        self.fn.close()


class GroupScoring:
    """Groups scored as they finish (``submit``: ``run_episodes``' ``on_group_done``), one at
    a time on a thread of its own, while the round generates the others: each
    ``score_trajectories`` of its group, then the distillation ``teacher``'s logprobs of
    it, where there is one. ``result()`` waits for the last and returns the scores in
    prompt order; an error of any (``reward.on_error=raise``) is raised there."""

    def __init__(
        self,
        *,
        score: ScoreFn,
        correct_function: str | None,
        on_error: OnError,
        teacher: TimedTeacher | None = None,
    ) -> None:
        self._score, self._correct = score, correct_function
        self._on_error: OnError = on_error
        self._teacher = teacher
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="group-scores")
        self._futures: list[tuple[int, Future[RewardScores]]] = []
        self._busy = self._teacher_busy = 0.0

    def submit(self, first: int, group: list[Trajectory]) -> None:
        self._futures.append((first, self._pool.submit(self._run, first, group)))

    def _run(self, first: int, group: list[Trajectory]) -> RewardScores:
        t0 = time.perf_counter()
        try:
            scores = score_trajectories(
                group,
                score=self._score,
                correct_function=self._correct,
                group_size=len(group),
                on_error=self._on_error,
                first=first,
            )
        finally:
            self._busy += time.perf_counter() - t0
        if self._teacher is not None:
            self._teacher_busy += self._teacher(group, group_size=len(group), first=first)
        return scores

    def result(self) -> RewardScores:
        """Every group's scores, in prompt order, once the last is scored. The seconds of
        the thread's work that did not hold the round up (its work less the wait for it
        here) go to ``TimedScore.hidden`` and ``TimedTeacher.hidden``, shared in
        proportion to the seconds each took."""
        t0 = time.perf_counter()
        try:
            ordered = sorted(self._futures, key=lambda item: item[0])
            scores = RewardScores.concat([future.result() for _, future in ordered])
        finally:
            self._pool.shutdown(wait=True, cancel_futures=True)
        waited = time.perf_counter() - t0
        busy = self._busy + self._teacher_busy
        hidden = max(0.0, busy - waited)
        if isinstance(self._score, TimedScore) and busy > 0:
            self._score.hidden += hidden * self._busy / busy
        if self._teacher is not None and busy > 0:
            self._teacher.hidden += hidden * self._teacher_busy / busy
        return scores

    def close(self) -> None:
        """Drops the groups not scored yet (the round failed); safe after ``result``."""
        self._pool.shutdown(wait=True, cancel_futures=True)


def score_trajectories(
    trajectories: list[Trajectory],
    *,
    score: ScoreFn,
    correct_function: str | None,
    group_size: int | None = None,
    on_error: OnError = "drop",
    first: int = 0,
) -> RewardScores:
    """Runs the reward functions on each trajectory's last turn and records the results
    as parts of its reward (with the environment's per-turn rewards, where any is
    non-zero). ``group_size``: trajectories per prompt (prompt-major), for group rewards;
    None: runs of trajectories with the same row ``_index``. Every sample a failed call
    scored (``RewardScores.errors``) fails as ``reward_error`` (``rollout/reward.fail``)
    with ``on_error`` (``reward.on_error``). ``first``: the first sample's index in the
    round, for the messages."""
    prompts = {}
    if _reads_prompts(score):  # the context of the scored (last) turn, as the engine got it
        prompts["prompt_ids"] = [sequence_ids(t.prompt_ids, t.turns[:-1]) for t in trajectories]
    scores = score(
        completions=[t.completion.text for t in trajectories],
        rows=[t.row for t in trajectories],
        group_size=group_size,
        **prompts,
    )
    for i, traj in enumerate(trajectories):
        turns = tuple(turn.reward for turn in traj.turns)
        record_parts(
            traj,
            scores={name: values[i] for name, values in scores.parts.items()},
            functions=scores.total[i],
            turns=turns if any(turns) else (),
            extras={name: found[i] for name, found in scores.extras.items() if found[i]},
        )
        if correct_function is not None and correct_function in scores.parts:
            # a TRL function that did not apply (None) judged nothing: not correct
            judged = scores.parts[correct_function][i]
            traj.correct = judged is not None and judged >= 1.0
    for error in scores.errors:
        for i in range(error.sample_index, error.sample_index + error.samples):
            fail(
                trajectories[i],
                reason="reward_error",
                on_error=on_error,
                message=error.describe(),
                sample=first + i,
            )
    return scores


def _reads_prompts(score: object) -> bool:
    """Whether ``score`` wants ``prompt_ids`` (``RewardScorer.reads_prompts``)."""
    return isinstance(score, ReadsPrompts) and score.reads_prompts
