"""The teacher's logprobs of the samples, asked per group of a scored round (on-policy
distillation, ``algo/distill.py``).

    a round's trajectories (P*G, prompt-major), scored ─► per group of G:
        teacher.token_logprobs(prompt + turns, starts=len(prompt)) ─► the model's tokens'
        (teacher.top_logprobs with algo.teacher_top_k: the top k at each token too)
        ├─► Trajectory.teacher_logprobs (tool and environment tokens dropped)
        └─► the call raised, or gave a wrong count or a non-finite logprob:
            each sample it covers fails as reward_error (reward.on_error: dropped,
            trained as 0 without the teacher's term, or the run stops)

With ``rollout.max_staleness >= 1`` each group is asked as soon as its reward functions
have scored it, on the thread that scores the groups as they finish
(``episode_scores.GroupScoring``), while the engine generates the rest. Otherwise, and
for the samples a rollout did not hand out group by group (an agent's), once the round
is scored (``driver/rollouts.generate_round``). Either way before the groups reach a
batch. A sample that failed already (its environment, its reward) is not sent: it
trains on no teacher's term. A sample is asked once.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol, TypeVar

from grouprl.config.containment import OnError
from grouprl.engines.base import TopLogprobs
from grouprl.rollout.reward import fail
from grouprl.types import Trajectory

V = TypeVar("V")


class TokenScorer(Protocol):
    """What the loop needs of a teacher (``engines/teacher.Teacher``)."""

    def token_logprobs(self, ids: list[list[int]], starts: list[int]) -> list[list[float]]:
        """For each ``ids[i]``, log p(ids[i][t] | ids[i][:t]) for t from ``starts[i]`` to
        the end."""
        ...

    def top_logprobs(self, ids: list[list[int]], starts: list[int], k: int) -> list[TopLogprobs]:
        """The same, with the ids and logprobs of the teacher's ``k`` most likely tokens at
        each position."""
        ...

    def released(self) -> AbstractContextManager[None]:
        """A block during which colocated teacher engines free the training GPU's memory."""
        ...

    def close(self) -> None: ...


class TimedTeacher:
    """The teacher's ``engines``, asked through ``__call__``, and the seconds the calls
    took since the round began (``seconds``), of which ``hidden`` ran while the round
    still generated (``GroupScoring`` sets it)."""

    def __init__(self, engines: TokenScorer, *, on_error: OnError, top_k: int) -> None:
        self.engines, self._top_k = engines, top_k
        self._on_error: OnError = on_error
        self.seconds = self.hidden = 0.0
        self._asks = True

    @contextmanager
    def held(self) -> Iterator[None]:
        """A block whose episodes are not asked (validation's: they train nothing)."""
        self._asks = False
        try:
            yield
        finally:
            self._asks = True

    def __call__(self, trajectories: list[Trajectory], *, group_size: int, first: int = 0) -> float:
        """``ask_teacher`` with the run's settings; the seconds it took."""
        if not self._asks:
            return 0.0
        spent = ask_teacher(
            trajectories,
            teacher=self.engines,
            group_size=group_size,
            on_error=self._on_error,
            top_k=self._top_k,
            first=first,
        )
        self.seconds += spent
        return spent


def ask_teacher(
    trajectories: list[Trajectory],
    *,
    teacher: TokenScorer,
    group_size: int,
    on_error: OnError,
    top_k: int = 0,
    first: int = 0,
) -> float:
    """Sets ``teacher_logprobs`` (and with ``top_k`` > 0, ``algo.teacher_top_k``, the
    teacher's top k at each generated token) on each sample of ``trajectories`` that has
    not failed and has none yet, one teacher call per group of ``group_size``; the seconds
    the calls took. A call that fails fails each sample it covers (``reward_error``, with
    ``on_error``); so does a sample whose logprobs are not one finite float per generated
    token. ``first``: the round's index of ``trajectories[0]`` (the samples' indices in
    the failures' messages)."""
    started = time.perf_counter()
    for start in range(0, len(trajectories), group_size):
        asked = [
            (first + start + k, t)
            for k, t in enumerate(trajectories[start : start + group_size])
            if t.reward_parts.failure is None
            and t.stop_reason != "env_error"  # failed once the round ends (zero_failed_episodes)
            and t.teacher_logprobs is None
        ]
        if not asked:
            continue
        try:
            ids = [t.sequence_ids() for _, t in asked]
            starts = [len(t.prompt_ids) for _, t in asked]
            got = (
                teacher.top_logprobs(ids, starts, top_k)
                if top_k > 0
                else [(lps, None, None) for lps in teacher.token_logprobs(ids, starts)]
            )
            if len(got) != len(asked):
                raise ValueError(f"{len(got)} answers for {len(asked)} sequences")
        except Exception as err:  # the teacher's failure is these samples', never a 0
            for i, t in asked:
                fail(t, reason="reward_error", on_error=on_error, message=_said(err), sample=i)
            continue
        for (i, t), (logprobs, top_ids, top_lps) in zip(asked, got, strict=True):
            try:
                kept = model_tokens(t, [float(v) for v in logprobs])
                if not all(math.isfinite(v) for v in kept):
                    raise ValueError(
                        "a non-finite logprob (the teacher gives a sampled token no mass)"
                    )
                t.teacher_logprobs = kept
                if top_ids is not None and top_lps is not None:
                    t.teacher_top_ids = model_tokens(t, top_ids)
                    t.teacher_top_logprobs = model_tokens(t, top_lps)
            except ValueError as err:
                fail(t, reason="reward_error", on_error=on_error, message=_said(err), sample=i)
    return time.perf_counter() - started


def model_tokens(traj: Trajectory, values: list[V]) -> list[V]:
    """Of ``values`` (one per token after the prompt: the turns' and the observations'),
    those of the model's tokens, turn after turn; ValueError for a wrong count."""
    after_prompt = len(traj.sequence_ids()) - len(traj.prompt_ids)
    if len(values) != after_prompt:
        raise ValueError(f"{len(values)} logprobs for {after_prompt} tokens after the prompt")
    kept: list[V] = []
    start = 0
    for turn in traj.turns:
        end = start + len(turn.completion.token_ids)
        kept += values[start:end]
        start = end + len(turn.observation_ids)
    return kept


def _said(err: BaseException) -> str:
    return f"the teacher failed: {type(err).__name__}: {err}"
