"""Two models' tokenizers compared from their files, before either loads (stdlib only).

A second model that reads the policy's token ids (a distillation teacher scoring the
student's tokens) or its text (a reward model, a judge) must mean by each id what the
policy means, and end its answers as the policy does. These read ``tokenizer.json``,
``tokenizer_config.json`` and ``generation_config.json`` of a local directory or a
``builtin:`` model; a hub name is not on disk, so they answer None (cannot tell here: the
models load as given). ``max_positions`` reads a model's context from its config.json.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grouprl.assets import ASSETS_DIR, BUILTIN_PREFIX


def vocab_difference(a: str, b: str) -> str | None:
    """How the tokenizers of models ``a`` and ``b`` differ, as a phrase ("'x' is token 5 in
    one and 7 in the other"), or None when they map every token to the same id (the BPE
    vocabulary, its merges and the added tokens) or either cannot be read here."""
    first, second = _tokenizer(a), _tokenizer(b)
    if first is None or second is None:
        return None
    ids_a, ids_b = _token_ids(first), _token_ids(second)
    if len(ids_a) != len(ids_b):
        return f"one has {len(ids_a)} tokens, the other {len(ids_b)}"
    for token, id_a in ids_a.items():
        if (id_b := ids_b.get(token)) != id_a:
            where = "is missing from the other" if id_b is None else f"and {id_b} in the other"
            return f"{token!r} is token {id_a} in one {where}"
    if first.get("model", {}).get("merges") != second.get("model", {}).get("merges"):
        return "their BPE merges differ (the same text splits into other tokens)"
    return None


def end_token_ids(path: str) -> set[int] | None:
    """The ids that end an answer of model ``path``: ``generation_config.json``'s
    ``eos_token_id`` (one or a list) and ``tokenizer_config.json``'s ``eos_token``; None
    when ``path`` is not a directory here or names none."""
    root = _local(path)
    if root is None:
        return None
    ids: set[int] = set()
    eos = _json(root / "generation_config.json").get("eos_token_id")
    ids.update([eos] if isinstance(eos, int) else [i for i in eos or [] if isinstance(i, int)])
    token = _json(root / "tokenizer_config.json").get("eos_token")
    if isinstance(token, dict):  # older files: {"content": "<|im_end|>", ...}
        token = token.get("content")
    tokenizer = _tokenizer(path) if isinstance(token, str) else None
    if tokenizer is not None and (found := _token_ids(tokenizer).get(str(token))) is not None:
        ids.add(found)
    return ids or None


def max_positions(path: str) -> int | None:
    """The positions a local or ``builtin:`` model reads at most (config.json's
    ``max_position_embeddings``); None when it cannot be read here (a hub name, no key)."""
    root = _local(path)
    found = _json(root / "config.json").get("max_position_embeddings") if root else None
    return found if isinstance(found, int) and not isinstance(found, bool) else None


def _local(path: str) -> Path | None:
    if path.startswith(BUILTIN_PREFIX):
        root = ASSETS_DIR / path[len(BUILTIN_PREFIX) :]
    else:
        root = Path(path).expanduser()
    return root if root.is_dir() else None


def _tokenizer(path: str) -> dict[str, Any] | None:
    root = _local(path)
    found = _json(root / "tokenizer.json") if root is not None else {}
    return found or None


def _token_ids(tokenizer: dict[str, Any]) -> dict[str, int]:
    """Every token's id: the model's vocabulary and the added (special) tokens."""
    vocab = tokenizer.get("model", {}).get("vocab")
    ids = dict(vocab) if isinstance(vocab, dict) else {}
    for added in tokenizer.get("added_tokens", []):
        ids[added["content"]] = added["id"]
    return ids


def _json(path: Path) -> dict[str, Any]:
    """The file's JSON object, or {} when it is missing or not an object."""
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}
