"""Model turns: what every episode's engine calls share, whether grouprl's environments
drive it (``episodes.run_episodes``) or an agent does, through the gateway
(``gateway/server.py``).

::

    an episode wants another turn (its turns so far, the context it would continue)
        │ TurnLimits.turn_limit(turns)        past env.max_turns ─────► LimitHit(max_turns)
        │ TurnLimits.context_limit(context)   no room in rollout.max_model_len
        │                                                     ─────► LimitHit(context_overflow)
        ▼ TurnLimits.turn_tokens(context, asked): the turn's max_tokens
    TurnEngine.generate(contexts, max_tokens=[...])    the turns of many episodes together
        │ ONE engine.generate, each context with its own max_tokens (SamplingSettings
        │ .max_tokens_each; None when they agree); the rollout's engine call k samples
        ▼ with seeds.call_seed(seed, k)
    completions, in the order of the contexts

Room for a turn (``TurnLimits.whole_turns``): an environment's turns go out together under
``rollout.max_tokens``, so its next turn needs room for all of them; the gateway gives each
call the room that is left, one token at least.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from grouprl.engines.base import OnGroup, RolloutEngine, SamplingSettings
from grouprl.envs.base import StopReason
from grouprl.seeds import call_seed
from grouprl.types import Completion


def first_version(completion: Completion, engine: RolloutEngine) -> int:
    """The weight version that sampled the completion's first token: its oldest (a
    generation continued after a weight push has newer ones after it, ``Completion
    .versions``), what an episode's staleness counts from; the engine's version for an
    engine that does not tag its tokens, or a completion without tokens."""
    return completion.versions[0] if completion.versions else engine.weight_version


@dataclass(frozen=True)
class LimitHit:
    """A turn the episode may not have: why it ends, and the words for the agent or log."""

    stop_reason: StopReason
    message: str


@dataclass(frozen=True)
class TurnLimits:
    """``env.max_turns`` and ``rollout.max_model_len``, for every episode of a rollout."""

    max_turns: int
    """Model turns per episode at most (``env.max_turns``)."""
    max_model_len: int
    """A turn's context and its tokens fit in this many (``rollout.max_model_len``)."""
    max_tokens: int
    """A turn's tokens at most (``rollout.max_tokens``)."""
    whole_turns: bool
    """A turn needs room for all ``max_tokens`` (environments), else for one token at least
    and gets the room left (the gateway)."""

    def turn_limit(self, turns: int) -> LimitHit | None:
        """Why an episode that had ``turns`` model turns may have no other, if so."""
        if turns < self.max_turns:
            return None
        message = f"the episode made its {self.max_turns} model calls (env.max_turns)"
        return LimitHit("max_turns", message)

    def context_limit(self, context_len: int) -> LimitHit | None:
        """Why a turn may not continue a context of ``context_len`` tokens, if so."""
        need = self.max_tokens if self.whole_turns else 1
        if context_len + need <= self.max_model_len:
            return None
        turn = f"a turn of {self.max_tokens} tokens" if self.whole_turns else "a completion"
        message = (
            f"the context is {context_len} tokens, which leaves no room for {turn} in "
            f"rollout.max_model_len={self.max_model_len}"
        )
        return LimitHit("context_overflow", message)

    def turn_tokens(self, context_len: int, *, asked: int | None = None) -> int:
        """The max_tokens of a turn after ``context_len`` tokens: ``max_tokens``, lowered to
        the room left and to what the caller ``asked`` for."""
        room = self.max_model_len - context_len
        return min(self.max_tokens, room, asked or room)


class TurnEngine:
    """The engine calls of one rollout: the running episodes' turns batched, each call
    seeded by its position in the rollout. Not thread-safe: one thread calls it."""

    def __init__(self, engine: RolloutEngine, settings: SamplingSettings) -> None:
        self.engine, self.settings = engine, settings
        self.calls = 0
        """Engine calls that answered; the next samples with ``call_seed(seed, calls)``."""

    def generate(
        self,
        contexts: Sequence[list[int]],
        *,
        max_tokens: Sequence[int] | None = None,
        group_size: int = 1,
        on_group: OnGroup | None = None,
    ) -> list[list[Completion]]:
        """``group_size`` completions per context, in order; ``max_tokens``: each
        context's (default ``settings.max_tokens``). One engine call whatever the mix: when
        the values differ, the engine gets each prompt's (``max_tokens_each``) and their
        largest as ``max_tokens``. Raises what the engine raises (then the call takes no
        seed: the next one reuses it). No context: no call. ``on_group``: the engine's
        (a ``ReplicaSet``: ``ReplicaSet.generate``)."""
        if not contexts:
            return []
        lengths = list(max_tokens) if max_tokens is not None else [self.settings.max_tokens]
        settings = replace(
            self.settings,
            group_size=group_size,
            max_tokens=max(lengths, default=self.settings.max_tokens),
            max_tokens_each=tuple(lengths) if len(set(lengths)) > 1 else None,
            seed=call_seed(self.settings.seed, self.calls),
        )
        if on_group is None:
            groups = self.engine.generate(list(contexts), settings)
        else:  # a ReplicaSet (ReplicaSet.generate)
            groups = self.engine.generate(list(contexts), settings, on_group=on_group)  # type: ignore[call-arg]
        self.calls += 1
        return groups
