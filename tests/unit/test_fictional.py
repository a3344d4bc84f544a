"""The built-in fictional encyclopedia and its questions: fixed, split by entity, retrievable."""

from __future__ import annotations

import subprocess
import sys

import pytest

from grouprl.assets import fictional
from grouprl.envs.search import SearchIndex, build_index


def test_generation_is_deterministic():
    assert fictional.passages() == fictional.passages()
    assert fictional.questions("train") == fictional.questions("train")
    assert fictional.questions("test") == fictional.questions("test")


def test_split_sizes_match_the_generator():
    for split in fictional.SPLITS:
        assert len(fictional.questions(split)) == fictional.SPLIT_SIZES[split]
    assert 300 <= len(fictional.passages()) <= 600


def test_passages_have_unique_ids_and_titles():
    passages = fictional.passages()
    assert len({p["id"] for p in passages}) == len(passages)
    assert len({p["title"] for p in passages}) == len(passages)
    assert all(set(p) == {"id", "title", "text"} for p in passages)


def test_splits_are_disjoint_by_entity_and_the_corpus_holds_both():
    train, test = fictional.questions("train"), fictional.questions("test")
    assert {q["entity"] for q in train}.isdisjoint({q["entity"] for q in test})
    assert {q["passage_id"] for q in train}.isdisjoint({q["passage_id"] for q in test})
    ids = {p["id"] for p in fictional.passages()}
    assert {q["passage_id"] for q in train + test} <= ids


def test_every_answer_is_written_in_its_passage():
    text = {p["id"]: p["text"] for p in fictional.passages()}
    for split in fictional.SPLITS:
        for q in fictional.questions(split):
            assert q["answer"] and all(isinstance(a, str) and a for a in q["answer"])
            assert q["answer"][0] in text[q["passage_id"]], q
            assert q["entity"] in q["question"]


def test_unknown_split_is_refused():
    with pytest.raises(ValueError, match="choose one of"):
        fictional.questions("validation")


@pytest.mark.procs
def test_import_needs_no_torch_or_search_backend():
    code = (
        "import sys, grouprl.assets.fictional; print(sorted({'torch', 'bm25s'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_bm25_finds_the_answering_passage_for_test_questions(tmp_path):
    """Retrieval must be possible: the passage is in BM25's top 3 for >= 80% of questions
    (measured: 100%, and top 1 for all of them, since every name is unique)."""
    build_index("builtin:fictional", tmp_path / "index", progress=False)
    index = SearchIndex.load(tmp_path / "index")
    questions = fictional.questions("test")
    found = [q["passage_id"] in [p.id for p in index.search(q["question"], k=3)] for q in questions]
    rate = sum(found) / len(found)
    print(f"fictional test questions with their passage in BM25 top 3: {rate:.1%}")
    assert rate >= 0.8
