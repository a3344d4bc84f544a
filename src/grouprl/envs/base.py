"""The environment seam: an episode starts from a dataset row and answers each model turn.

    env.start(row)          -> the first messages (system/user)
    env.step(model_text)    -> Step: reply messages, this turn's reward, done + stop reason

One ``Episode`` object per episode (``Environment.episode(row)`` makes it), so
episodes of a batch run side by side. Stop reasons: ``answered``, ``max_turns``,
``context_overflow``, ``max_tokens`` (a turn cut off at the length limit),
``parse_error``, ``tool_error``.

Observations are rendered into tokens by the chat template *after* the model's
own tokens, never by re-tokenising the conversation (``render_observation``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

STOP_REASONS = (
    "answered",
    "max_turns",
    "context_overflow",
    "max_tokens",
    "parse_error",
    "tool_error",
)


@dataclass
class Step:
    messages: list[dict[str, Any]]  # the environment's reply (e.g. tool messages); [] when done
    reward: float = 0.0  # turn-level reward for the model turn just taken
    done: bool = False
    stop_reason: str | None = None  # one of STOP_REASONS when done
    info: dict[str, Any] = field(default_factory=dict)  # e.g. tool_calls, tool_errors


class Episode(Protocol):
    def start(self) -> list[dict[str, Any]]: ...

    def step(self, model_text: str) -> Step: ...


class Environment(Protocol):
    def episode(self, row: dict[str, Any]) -> Episode: ...

    @property
    def template_kwargs(self) -> dict[str, Any]:
        """Extra chat-template arguments for every rendering (e.g. ``tools``)."""
        ...


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
