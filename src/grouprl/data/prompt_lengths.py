"""Prompt lengths in tokens without transformers or torch, for ``grouprl plan``.

A run renders each prompt with the tokenizer's chat template (``prompts.render_prompt``)
and skips the ones longer than ``data.max_prompt_tokens``. ``grouprl plan`` loads
nothing heavy, so it measures them with the model directory's ``tokenizer.json`` (the
``tokenizers`` library) and its chat template rendered by jinja2 the way transformers'
``apply_chat_template`` does (a sandboxed environment with ``trim_blocks``,
``lstrip_blocks``, loop controls, ``tojson``, ``raise_exception``, ``strftime_now``, the
special tokens as variables; the text encoded without adding special tokens).
``tests/unit/test_data_checks.py`` pins the counts to transformers' own on the shipped
models. Where the tokenizer is not a local directory with a ``tokenizer.json``, or the
template uses something else, the lengths are not measured (None) and the run measures
them as it loads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from grouprl.config.model_data import DataConfig
from grouprl.data.prompts import prompt_messages

SPECIAL_TOKENS = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)


@dataclass(frozen=True)
class Lengths:
    """Prompt lengths of some rows: ``tokens[i]`` is row ``indices[i]``'s."""

    tokens: list[int]
    indices: list[Any]

    def over(self, limit: int) -> list[tuple[Any, int]]:
        """``(row index, tokens)`` of the prompts longer than ``limit``."""
        return [(i, n) for i, n in zip(self.indices, self.tokens, strict=True) if n > limit]

    def longest(self) -> tuple[Any, int]:
        n = max(self.tokens)
        return self.indices[self.tokens.index(n)], n


def prompt_lengths(
    model_dir: Path, rows: list[dict[str, Any]], *, data: DataConfig
) -> Lengths | None:
    """The single-turn prompt lengths of ``rows`` (their question through ``data``'s
    system prompt and template) with the tokenizer in ``model_dir``; None where it cannot
    be measured without transformers (module docstring)."""
    files = _tokenizer_files(model_dir)
    if files is None or not rows:
        return None
    tokenizer_file, config = files
    template = _chat_template(model_dir, config)
    try:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(tokenizer_file))
        tokenizer.no_padding()  # a tokenizer.json may pad a batch to its longest
        tokenizer.no_truncation()
        render = _compile(template) if template is not None else None
        texts = [
            _text(row, data=data, render=render, special=_special_tokens(config)) for row in rows
        ]
    except Exception:  # any template or tokenizer it cannot read: measured at load instead
        return None
    add_special = render is None  # a base model's text gets the tokenizer's usual tokens
    encoded = tokenizer.encode_batch(texts, add_special_tokens=add_special)
    return Lengths([len(e.ids) for e in encoded], [r.get("_index", i) for i, r in enumerate(rows)])


def _tokenizer_files(model_dir: Path) -> tuple[Path, dict[str, Any]] | None:
    tokenizer_file = model_dir / "tokenizer.json"
    config_file = model_dir / "tokenizer_config.json"
    if not tokenizer_file.is_file():
        return None
    config = json.loads(config_file.read_text(encoding="utf-8")) if config_file.is_file() else {}
    return tokenizer_file, config


def _chat_template(model_dir: Path, config: dict[str, Any]) -> str | None:
    jinja = model_dir / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    template = config.get("chat_template")
    return template if isinstance(template, str) else None  # a list of named ones: not here


def _special_tokens(config: dict[str, Any]) -> dict[str, str]:
    found = {}
    for name in SPECIAL_TOKENS:
        value = config.get(name)
        if isinstance(value, dict):  # an AddedToken's fields
            value = value.get("content")
        if isinstance(value, str):
            found[name] = value
    return found


def _compile(template: str) -> Any:
    """The template compiled as transformers compiles chat templates."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(template)


def _text(row: dict[str, Any], *, data: DataConfig, render: Any, special: dict[str, str]) -> str:
    messages = prompt_messages(
        row,
        prompt_key=data.prompt_key,
        system_prompt=data.system_prompt,
        prompt_template=data.prompt_template,
    )
    if render is None:  # no chat template: render_prompt's plain text
        return "\n\n".join(m["content"] for m in messages)
    return render.render(messages=messages, add_generation_prompt=True, **special)
