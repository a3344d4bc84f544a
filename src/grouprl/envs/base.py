"""The environment protocol: an episode starts from a dataset row and answers each model turn.

    Environment.episode(row) -> Episode          one object per episode (they run side by side)
    episode.start()           -> the first chat messages (system/user)
    episode.step(model_text)  -> Step: reply messages, this turn's reward, done + stop reason
    episode.close()           -> optional: called once when the episode ends, however it ends

An environment may also have ``template_kwargs`` (extra chat-template arguments, e.g.
``{"tools": schemas}``; absent: none). ``start()`` must depend on the row only: the
``rollout.n`` episodes of a row share one prompt (a group), rendered once per row.

An episode is a function of its row and the model's turns: ``episode(row)``, ``start()``
and ``step(t)`` for the same texts in order rebuild it (what it returned may differ where
it samples or calls a tool). A contained environment relies on it: an episode whose worker
was replaced (another episode's step hung or crashed it) is replayed on the new worker
(``envs/contained.py``). A class that cannot be rebuilt so sets ``replayable = False``;
each of its episodes then gets a worker process of its own. ``start`` and ``step`` may be
``async def`` (awaited on the worker's one event loop); the steps of different episodes
run at once on threads (``env.concurrency`` per worker), so state the environment object
shares between its episodes must be safe for that.

Stop reasons (``StopReason``): ``answered`` (the environment ended the episode),
``max_turns``, ``context_overflow`` (the next turn would not fit
``rollout.max_model_len``), ``max_tokens`` (a turn cut off at the length limit),
``parse_error``, ``tool_error`` (an environment's own verdicts), and ``env_error`` (the
environment failed: a step raised, passed ``env.sandbox.timeout_s``, or crashed its worker
alone; ``env.on_error`` says whether the episode is left out of training, trains as reward 0
or stops the run). Observations are rendered into tokens by the chat template *after* the
model's own tokens, never by re-tokenising the conversation (``render_observation``).
docs/environments.md is the user's guide.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from grouprl.config.env_keys import StopReason

Message = dict[str, Any]
"""A chat message: ``{"role": "user" | "system" | "tool" | ..., "content": str, ...}``."""


@dataclass
class Step:
    """An environment's answer to one model turn.

    ``reward`` is the turn-level reward of the model turn just taken (the multi-turn
    estimators use it, e.g. ``algo.advantage=mt_grpo``); the episode's outcome reward
    comes from ``reward.functions`` on its last turn. ``messages`` go back to the model
    (rendered after its turn) unless ``done``. ``info`` holds per-turn counts that become
    metrics: ``tool_calls`` and ``tool_errors`` (``Toolbox.run`` fills them).
    """

    messages: list[Message] = field(default_factory=list)
    reward: float = 0.0
    done: bool = False
    stop_reason: StopReason | None = None  # when done; None reads as "answered"
    info: dict[str, Any] = field(default_factory=dict)


class Episode(Protocol):
    def start(self) -> list[Message]: ...

    def step(self, model_text: str) -> Step: ...


class Environment(Protocol):
    def episode(self, row: dict[str, Any]) -> Episode: ...


@dataclass(frozen=True)
class EnvContext:
    """What a user environment may need from the run, passed as the keyword-only ``ctx``
    argument to a class whose ``__init__`` takes one (``cls(**env.args, ctx=...)``)."""

    prompt_key: str
    """``data.prompt_key``: the row's question column."""
    answer_key: str
    """``data.answer_key``: the row's reference answer column."""
    system_prompt: str | None
    """``data.system_prompt``."""
    prompt_template: str
    """``data.prompt_template`` (``{question}`` marks the question)."""
    max_turns: int
    """``env.max_turns``."""
    tool_format: str
    """``env.tool_format``: ``xml`` or ``qwen``, for ``Toolbox(fmt=...)``."""
    cache_dir: Path
    """A directory shared by runs, for indexes and downloads."""

    def prompt_messages(self, row: dict[str, Any], *, system_prompt: str | None = None):
        """The row's opening as single-turn runs render it (``opening``)."""
        return opening(self, row, system_prompt=system_prompt)


class Prompting(Protocol):
    """The data section's prompting: ``data.prompt_key``, ``system_prompt``, ``prompt_template``."""

    @property
    def prompt_key(self) -> str: ...
    @property
    def system_prompt(self) -> str | None: ...
    @property
    def prompt_template(self) -> str: ...


def opening(env: Prompting, row: dict[str, Any], *, system_prompt: str | None = None):
    """The row's opening as single-turn runs render it: ``system_prompt`` (or
    ``env.system_prompt``) and the question through ``env.prompt_template``, or the row's
    own chat messages."""
    from grouprl.data.prompts import prompt_messages

    return prompt_messages(
        row,
        prompt_key=env.prompt_key,
        system_prompt=env.system_prompt if system_prompt is None else system_prompt,
        prompt_template=env.prompt_template,
    )


@runtime_checkable
class Replays(Protocol):
    """An environment that says whether its episodes can be rebuilt (default: they can)."""

    replayable: bool


@runtime_checkable
class Templated(Protocol):
    """An environment with keywords for the chat template (``enable_thinking``, tools)."""

    template_kwargs: dict[str, Any]


@runtime_checkable
class OpensRows(Protocol):
    """An environment that answers many rows' openings in one call (a contained one)."""

    def openings(self, rows: list[dict[str, Any]]) -> list[list[Message]]: ...


def replayable(env: Environment) -> bool:
    """Whether ``env``'s episodes can be rebuilt from their row and model turns (the
    protocol's default); an environment opts out with ``replayable = False``."""
    return bool(env.replayable) if isinstance(env, Replays) else True


def template_kwargs_of(env: Environment) -> dict[str, Any]:
    """``env.template_kwargs``, or {} for an environment without one."""
    return dict((env.template_kwargs if isinstance(env, Templated) else None) or {})


def first_messages(env: Environment, rows: list[dict[str, Any]]) -> list[list[Message]]:
    """Each row's opening messages (``episode(row).start()``), or ``openings(rows)``."""
    from grouprl.sandbox.user_code import awaited_call

    if isinstance(env, OpensRows):
        return env.openings(rows)
    return [awaited_call(env.episode(row).start) for row in rows]


def render_observation(tokenizer, messages: list[dict[str, Any]], **template_kwargs) -> list[int]:
    """Token ids of ``messages`` as the chat template renders them right after an
    assistant turn that ended with its end-of-turn token, through the next assistant
    header.

    The template renders a fixed conversation ending with an assistant message, with
    and without ``messages``; the text after that assistant message's end-of-turn
    token is the observation. It is tokenised on its own: it starts right after a
    special token, so no merge crosses the boundary.
    """
    eos = tokenizer.eos_token
    base = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]
    before = tokenizer.apply_chat_template(base, tokenize=False, **template_kwargs)
    after = tokenizer.apply_chat_template(
        base + messages, tokenize=False, add_generation_prompt=True, **template_kwargs
    )
    cut = before.rfind(eos)
    if cut < 0 or not after.startswith(before[: cut + len(eos)]):
        raise ValueError(
            "the chat template does not end an assistant turn with the tokenizer's "
            f"eos_token {eos!r}, so observations cannot be placed after the model's tokens"
        )
    return tokenizer.encode(after[cut + len(eos) :], add_special_tokens=False)
