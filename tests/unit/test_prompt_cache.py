"""A large prompt set is rendered once per process (data/prompts.py, ``RenderCache``):
another run's tokenizer of the same definition gets the same ids, as fresh lists; a
change to anything the ids depend on renders again."""

from __future__ import annotations

import pytest
from test_data import CHAT_TEMPLATE, byte_tokenizer

from grouprl.data import prompts
from grouprl.data.prompts import RenderCache, render_conversations


def conversations(n: int, *, text: str = "What is {i}+1?") -> list[list[dict[str, str]]]:
    return [[{"role": "user", "content": text.format(i=i)}] for i in range(n)]


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch) -> RenderCache:
    """This test's own cache, keeping sets of 4 to 8 rows (the process's: 1,024 to 50,000)."""
    cache = RenderCache(min_rows=4, max_rows=8, max_sets=2)
    monkeypatch.setattr(prompts, "RENDERED", cache)
    return cache


def test_a_second_tokenizer_of_the_same_definition_gets_the_kept_ids_as_fresh_lists(cache):
    first = render_conversations(byte_tokenizer(chat_template=CHAT_TEMPLATE), conversations(6))
    first[0].append(-1)  # a caller changing its ids changes no later run's
    again = render_conversations(byte_tokenizer(chat_template=CHAT_TEMPLATE), conversations(6))
    uncached = render_conversations(
        byte_tokenizer(chat_template=CHAT_TEMPLATE), conversations(6), chunk=2
    )
    assert len(cache._sets) == 1  # the second call was a hit, not a second set
    assert again == uncached and again[0][-1] != -1
    assert type(again[0]) is list and all(type(t) is int for t in again[0])


def test_what_the_ids_depend_on_is_in_the_key(cache):
    tok = byte_tokenizer(chat_template=CHAT_TEMPLATE)
    base = cache.key(tok, conversations(6), {})
    render_conversations(tok, conversations(6))  # sets the backend's padding: not a change
    assert cache.key(tok, conversations(6), {}) == base
    other_template = byte_tokenizer(chat_template=CHAT_TEMPLATE.replace("\n", " "))
    more_tokens = byte_tokenizer(chat_template=CHAT_TEMPLATE)
    more_tokens.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|x|>"]})
    changed = [
        cache.key(tok, conversations(6, text="What is {i}+2?"), {}),
        cache.key(tok, conversations(7), {}),
        cache.key(tok, conversations(6), {"tools": [{"name": "calc"}]}),
        cache.key(other_template, conversations(6), {}),
        cache.key(more_tokens, conversations(6), {}),
    ]
    assert base not in changed and len(set(changed)) == len(changed)
    assert cache.key(tok, conversations(3), {}) is None  # small sets are not kept
    assert cache.key(tok, conversations(9), {}) is None  # nor large ones


def test_the_least_recently_used_set_goes_first(cache):
    tok = byte_tokenizer(chat_template=CHAT_TEMPLATE)
    sets = [conversations(n) for n in (4, 5, 6)]
    for convs in (sets[0], sets[1], sets[0], sets[2]):  # sets[1] is then the oldest used
        render_conversations(tok, convs)
    kept = set(cache._sets)
    assert kept == {cache.key(tok, sets[0], {}), cache.key(tok, sets[2], {})}
