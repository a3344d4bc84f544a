"""Turn a data row into prompt token ids with the tokenizer's chat template.

A text prompt becomes one user message: ``data.prompt_template`` with ``{question}``
replaced by the row's prompt column (plain text replacement, so other braces in the
template, such as ``\\boxed{}``, are left alone). A chat-message prompt (a list of
``{role, content}``, ``data/messages.py``) goes to the template as given, and
``data.prompt_template`` must then be the default: a template set for text is refused
rather than silently ignored. ``data.system_prompt``, when set, comes first as a system
message, unless the row's messages have their own. The template's generation prompt (the
assistant header) ends the ids, so the engine starts the answer right away.

A tokenizer without a chat template (a base model) gets the system prompt and
the user message as plain text, encoded with the tokenizer's usual special
tokens; this warns once. Message prompts need a chat template.
"""

from __future__ import annotations

import hashlib
import json
import logging
import warnings
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

from grouprl.config.model_data import DataConfig
from grouprl.data.messages import clean_messages, is_messages, with_system
from grouprl.data.sources import DataError, get_field

if TYPE_CHECKING:
    from tokenizers import Tokenizer as Backend
    from transformers import PreTrainedTokenizerBase as Tokenizer

logger = logging.getLogger(__name__)

PLACEHOLDER = "{question}"


def render_prompt(
    tokenizer: Tokenizer,
    row: dict[str, Any],
    *,
    prompt_key: str,
    system_prompt: str | None,
    prompt_template: str,
) -> list[int]:
    """Prompt token ids for one row, ending with the assistant's generation prompt."""
    if tokenizer.chat_template is None and is_messages(get_field(row, prompt_key)):
        raise DataError(
            f"row {row.get('_index', '?')} of data.prompt_key={prompt_key!r} holds chat "
            f"messages, but tokenizer {tokenizer.name_or_path!r} has no chat template to "
            "render them; use an instruct model (model.path), or text prompts"
        )
    messages = prompt_messages(
        row, prompt_key=prompt_key, system_prompt=system_prompt, prompt_template=prompt_template
    )
    if tokenizer.chat_template is None:
        return plain_prompt_ids(tokenizer, messages)
    return chat_prompt_ids(tokenizer, messages)


def render_questions(
    tokenizer: Tokenizer,
    rows: list[dict[str, Any]],
    *,
    prompt_key: str,
    system_prompt: str | None,
    prompt_template: str,
    chunk: int = 1024,
) -> list[list[int]]:
    """``render_prompt`` of every row. With a chat template, each chunk of rows is
    rendered and then encoded in one batched tokenizer call, as ``apply_chat_template``
    does for a batch of conversations (the same ids as one row at a time; 20,000
    prompts in about a third of the time)."""
    if tokenizer.chat_template is None:
        return [
            render_prompt(
                tokenizer,
                row,
                prompt_key=prompt_key,
                system_prompt=system_prompt,
                prompt_template=prompt_template,
            )
            for row in rows
        ]
    conversations = [
        prompt_messages(
            row, prompt_key=prompt_key, system_prompt=system_prompt, prompt_template=prompt_template
        )
        for row in rows
    ]
    return render_conversations(tokenizer, conversations, chunk=chunk)


def render_conversations(
    tokenizer: Tokenizer,
    conversations: list[list[dict[str, Any]]],
    *,
    chunk: int = 1024,
    **template_kwargs,
) -> list[list[int]]:
    """``chat_prompt_ids`` of each conversation (an environment's opening messages), a
    chunk of them per batched ``apply_chat_template`` call (the same ids as one at a
    time). A tokenizer without a chat template (a base model) gets the plain text of a
    system message and a user message (``plain_prompt_ids``)."""
    if tokenizer.chat_template is None:
        return [plain_prompt_ids(tokenizer, messages) for messages in conversations]
    key = RENDERED.key(tokenizer, conversations, template_kwargs)
    if key is not None and (ids := RENDERED.get(key)) is not None:
        return ids
    out: list[list[int]] = []
    for start in range(0, len(conversations), chunk):
        encoded = tokenizer.apply_chat_template(
            conversations[start : start + chunk],
            add_generation_prompt=True,
            tokenize=True,
            **template_kwargs,
        )
        encoded = cast("Mapping[str, list[list[int]]] | list[list[int]]", encoded)  # a batch's
        ids = encoded["input_ids"] if not isinstance(encoded, list) else encoded
        out += [[int(t) for t in row_ids] for row_ids in ids]
    if key is not None:
        RENDERED.put(key, out)
    return out


class RenderCache:
    """Prompt ids of large prompt sets rendered earlier in this process, keyed by a hash of
    everything the ids depend on: the tokenizer (its class, its whole fast-tokenizer
    definition, special tokens and chat template), the conversations and the template's
    keyword arguments. Every run of a recipe renders its training set afresh (the 20,000
    rows of ``builtin:arith``: ~2 s on 2 cores), so a process that trains several times
    (the test suite, a notebook) renders each set once.

    Sets under ``min_rows`` are not kept (hashing them costs about what rendering does), nor
    over ``max_rows`` (a real dataset, rendered once per run: its ids as Python objects
    would take gigabytes), nor any a slow tokenizer renders (no definition to hash). The
    ids are kept as tuples and each hit returns fresh lists, so a caller that changes its
    ids changes no other run's."""

    def __init__(self, *, min_rows: int = 1024, max_rows: int = 50_000, max_sets: int = 4) -> None:
        self.min_rows, self.max_rows, self.max_sets = min_rows, max_rows, max_sets
        self._sets: OrderedDict[str, tuple[tuple[int, ...], ...]] = OrderedDict()

    def key(
        self, tokenizer: Tokenizer, conversations: list[list[dict[str, Any]]], template_kwargs: dict
    ) -> str | None:
        """The set's key, or None when it is not to be kept."""
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if not self.min_rows <= len(conversations) <= self.max_rows or backend is None:
            return None
        try:
            parts = [
                type(tokenizer).__qualname__,
                _definition(backend),
                json.dumps(tokenizer.special_tokens_map, sort_keys=True, default=str),
                str(tokenizer.chat_template),
                json.dumps(template_kwargs, sort_keys=True),
                json.dumps(conversations),
            ]
        except TypeError:  # a value JSON cannot hold (in a message or a template argument)
            return None
        digest = hashlib.sha256()
        for part in parts:
            digest.update(part.encode())
            digest.update(b"\0")
        return digest.hexdigest()

    def get(self, key: str) -> list[list[int]] | None:
        ids = self._sets.get(key)
        if ids is None:
            return None
        self._sets.move_to_end(key)
        return [list(row) for row in ids]

    def put(self, key: str, ids: list[list[int]]) -> None:
        self._sets[key] = tuple(tuple(row) for row in ids)
        while len(self._sets) > self.max_sets:
            self._sets.popitem(last=False)  # the least recently used


def _definition(backend: Backend) -> str:
    """A fast tokenizer's definition (vocabulary, merges, added tokens, normalizer,
    pre- and post-processor) without its padding and truncation, which transformers
    sets anew on each call."""
    definition = json.loads(backend.to_str())
    definition.pop("padding", None)
    definition.pop("truncation", None)
    return json.dumps(definition, sort_keys=True)


RENDERED = RenderCache()
"""This process's rendered prompt sets (``render_conversations``)."""


def plain_prompt_ids(tokenizer: Tokenizer, messages: list[dict[str, Any]]) -> list[int]:
    """A base model's prompt: ``system\n\nuser`` as plain text (the user message alone
    without a system one), encoded with the tokenizer's usual special tokens, as
    ``render_prompt`` does; other conversations need a chat template."""
    name = tokenizer.name_or_path
    roles = [m.get("role") for m in messages]
    if roles not in (["user"], ["system", "user"]) or not all(
        isinstance(m.get("content"), str) for m in messages
    ):
        raise DataError(
            f"tokenizer {name!r} has no chat template to render a conversation of roles "
            f"{roles}; a base model takes a text question (and a system prompt) only. Use an "
            "instruct model (model.path), or text prompts"
        )
    warnings.warn(
        f"tokenizer {name!r} has no chat template; prompts are the plain text of the "
        "system prompt and the question",
        stacklevel=2,
    )
    return _as_ids(tokenizer.encode("\n\n".join(m["content"] for m in messages)))


def prompt_messages(
    row: dict[str, Any], *, prompt_key: str, system_prompt: str | None, prompt_template: str
) -> list[dict[str, Any]]:
    """The conversation a row opens with: its chat messages as given, or its text as the
    user message through ``prompt_template``; ``system_prompt`` first unless the messages
    have a system message of their own."""
    value = get_field(row, prompt_key)
    if not is_messages(value):
        user = user_text(row, prompt_key=prompt_key, prompt_template=prompt_template)
        return with_system([{"role": "user", "content": user}], system_prompt)
    if prompt_template != PLACEHOLDER:
        raise DataError(
            f"data.prompt_template={prompt_template!r} rewrites text prompts, but row "
            f"{row.get('_index', '?')} of data.prompt_key={prompt_key!r} holds chat messages, "
            "which go to the chat template as given. Put the instruction into the messages "
            f"(or data.system_prompt), or set data.prompt_template={PLACEHOLDER!r} (the default)"
        )
    return with_system(clean_messages(value), system_prompt)


def user_text(row: dict[str, Any], *, prompt_key: str, prompt_template: str) -> str:
    """The user message of a text prompt: ``prompt_template`` with the row's prompt column
    in place."""
    if PLACEHOLDER not in prompt_template:
        raise DataError(
            f"data.prompt_template={prompt_template!r} has no {PLACEHOLDER} placeholder, "
            f"so the question would never reach the model; add {PLACEHOLDER} where it belongs"
        )
    return prompt_template.replace(PLACEHOLDER, str(get_field(row, prompt_key)))


def chat_prompt_ids(
    tokenizer: Tokenizer, messages: list[dict[str, Any]], **template_kwargs
) -> list[int]:
    """Token ids of ``messages`` through the chat template, ending with the assistant's
    generation prompt (``template_kwargs``, e.g. ``tools``, go to the template)."""
    out = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, **template_kwargs
    )
    return _as_ids(out)


def render_prompts(
    tokenizer: Tokenizer,
    rows: list[dict[str, Any]],
    *,
    data_cfg: DataConfig,
    render: Callable[[list[dict[str, Any]]], list[list[int]]] | None = None,
) -> tuple[list[list[int]], list[dict[str, Any]]]:
    """Prompt ids and the rows they came from, without rows over ``data.max_prompt_tokens``.

    ``render`` gives the rows' prompt ids (an environment's opening messages); by
    default each row's question through ``data.system_prompt`` and
    ``data.prompt_template``. Dropped rows are logged (count and their ``_index``); if
    every row is too long, this raises with the shortest length seen.
    """
    if render is None:
        all_ids = render_questions(
            tokenizer,
            rows,
            prompt_key=data_cfg.prompt_key,
            system_prompt=data_cfg.system_prompt,
            prompt_template=data_cfg.prompt_template,
        )
    else:
        all_ids = render(rows)
    kept_ids: list[list[int]] = []
    kept_rows: list[dict[str, Any]] = []
    too_long: list[tuple[int, int]] = []  # (row index, prompt length)
    for position, (row, ids) in enumerate(zip(rows, all_ids, strict=True)):
        if len(ids) > data_cfg.max_prompt_tokens:
            too_long.append((row.get("_index", position), len(ids)))
            continue
        kept_ids.append(ids)
        kept_rows.append(row)
    if too_long and not kept_ids:
        shortest = min(n for _, n in too_long)
        raise DataError(
            f"all {len(rows)} prompts are longer than data.max_prompt_tokens="
            f"{data_cfg.max_prompt_tokens} (shortest: {shortest} tokens); raise "
            f"data.max_prompt_tokens to at least {shortest} (and rollout.max_model_len with it)"
        )
    if too_long:
        shown = ", ".join(f"row {i} ({n} tokens)" for i, n in too_long[:5])
        more = f", ... {len(too_long) - 5} more" if len(too_long) > 5 else ""
        logger.warning(
            "skipped %d of %d prompts longer than data.max_prompt_tokens=%d: %s%s",
            len(too_long),
            len(rows),
            data_cfg.max_prompt_tokens,
            shown,
            more,
        )
    return kept_ids, kept_rows


def _as_ids(out: Any) -> list[int]:
    """Plain ``list[int]`` from what a tokenizer returns (list, dict/BatchEncoding, nested)."""
    if not isinstance(out, list | tuple) and "input_ids" in out:
        out = out["input_ids"]
    if not isinstance(out, list | tuple) and hasattr(out, "tolist"):
        out = out.tolist()
    out = list(out)
    if out and isinstance(out[0], list | tuple):
        assert len(out) == 1, "one conversation renders to one sequence"
        out = list(out[0])
    return [int(t) for t in out]
