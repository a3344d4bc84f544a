"""Chat-message prompts: a row's prompt column holding a conversation instead of text.

A message prompt is a non-empty list of ``{"role": ..., "content": ...}`` objects, the
shape verl's parquet files (``prompt``) and TRL's conversational datasets (``prompt``)
store::

    [{"role": "system", "content": "Answer after ####."},
     {"role": "user", "content": "Tom has 3 pens and buys 2. How many?"}]

Roles are ``system``, ``user`` and ``assistant``; every content is a string, and at least
one ``user`` message has text. Other keys of a message are passed to the chat template
as they are, except those whose value is null: a parquet struct column fills the fields a
row lacks with nulls, which a template would read as set. Anything else is a broken row
(``message_problem`` says why), skipped and reported like any other.
"""

from __future__ import annotations

from typing import Any

ROLES = ("system", "user", "assistant")


def is_messages(value: object) -> bool:
    """Whether a prompt value is meant as a conversation (a list), valid or not."""
    return isinstance(value, list | tuple)


def message_problem(value: Any) -> str | None:
    """Why ``value`` (a list) is not a usable conversation, or None if it is."""
    if not value:
        return "is an empty list of messages"
    for i, message in enumerate(value):
        if not isinstance(message, dict):
            return f"message {i} is {type(message).__name__}, not a {{role, content}} object"
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            return f"message {i} has role {role!r}; allowed roles: {', '.join(ROLES)}"
        if not isinstance(content, str):
            return (
                f"message {i} ({role}) has content of type {type(content).__name__}, not a string"
            )
    if not any(m["role"] == "user" and m["content"].strip() for m in value):
        return "has no user message with text"
    return None


def clean_messages(value: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Copies of the messages without null-valued keys (see the module docstring)."""
    return [{k: v for k, v in m.items() if v is not None} for m in value]


def with_system(messages: list[dict[str, Any]], system_prompt: str | None) -> list[dict[str, Any]]:
    """``messages`` with ``system_prompt`` first, unless it is unset or the messages
    already have a system message (the row's own wins)."""
    if not system_prompt or any(m["role"] == "system" for m in messages):
        return messages
    return [{"role": "system", "content": system_prompt}, *messages]
