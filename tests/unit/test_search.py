"""BM25 passage search: building (formats, broken lines, atomicity), loading, the agent tool."""

from __future__ import annotations

import gzip
import inspect
import json
import logging
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grouprl.cli import app
from grouprl.envs.search import (
    MANIFEST,
    OFFSETS,
    PASSAGES,
    Passage,
    SearchIndex,
    SearchIndexError,
    build_index,
    format_passages,
    make_search_tool,
    resolve_corpus,
)

TINY = [
    {
        "id": "p1",
        "title": "Harbour of Lisko",
        "text": "Lisko harbour shelters forty fishing boats.",
    },
    {"id": "p2", "title": "Vantor glacier", "text": "The Vantor glacier retreats each summer."},
    {"id": "p3", "title": "Quillon bakery", "text": "Quillon bakes rye bread with caraway seeds."},
    {
        "id": "p4",
        "title": "Ostrel tram",
        "text": "The Ostrel tram climbs the hill to the old fort.",
    },
    {"id": 5, "title": "Marrow lighthouse", "text": "Its lamp was lit by Ida Perrin in 1911."},
]


def write_jsonl(path: Path, rows: list, extra: dict[int, str] | None = None) -> Path:
    """One JSON object per row; ``extra`` puts raw text at given 1-based line numbers."""
    lines = [json.dumps(row) for row in rows]
    for number, raw in sorted((extra or {}).items()):
        lines.insert(number - 1, raw)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def tiny_index(tmp_path: Path) -> SearchIndex:
    build_index(write_jsonl(tmp_path / "tiny.jsonl", TINY), tmp_path / "index", progress=False)
    return SearchIndex.load(tmp_path / "index")


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("Where do the fishing boats shelter?", "p1"),
        ("glacier retreating", "p2"),
        ("caraway", "p3"),
        ("Which tram goes up to the fort?", "p4"),
        ("Who lit the lighthouse lamp?", "5"),  # integer ids come back as strings
    ],
)
def test_distinctive_query_finds_its_passage_first(tiny_index, query, expected):
    hits = tiny_index.search(query, k=3)
    assert hits[0].id == expected
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_search_returns_stored_text_and_only_matching_passages(tiny_index):
    hits = tiny_index.search("Vantor", k=3)
    assert hits == [Passage("p2", "Vantor glacier", TINY[1]["text"], hits[0].score)]
    assert tiny_index.search("zebra", k=3) == []  # no word in the vocabulary
    assert tiny_index.search("the of and", k=3) == []  # stopwords only
    assert len(tiny_index.search("Vantor glacier", k=50)) == 1  # k above the corpus size
    assert len(tiny_index) == 5
    assert tiny_index.manifest["passages"] == 5 and tiny_index.manifest["stemmer"] is None


def test_dpr_tsv_layout_with_header_and_quotes(tmp_path):
    tsv = tmp_path / "psgs.tsv"
    tsv.write_text(
        "id\ttext\ttitle\n"
        '1\t"Aaron ( or ; ""Aharon"") was a prophet."\tAaron\n'
        "2\tThe Zorvic river floods in spring.\tZorvic\n",
        encoding="utf-8",
    )
    report = build_index(tsv, tmp_path / "index", progress=False)
    assert report.passages == 2 and not report.skipped
    index = SearchIndex.load(tmp_path / "index")
    (hit,) = index.search("Aharon prophet", k=1)
    assert (hit.id, hit.title, hit.text) == ("1", "Aaron", 'Aaron ( or ; "Aharon") was a prophet.')
    assert index.search("Zorvic", k=1)[0].title == "Zorvic"


def test_tsv_without_header_is_a_user_error(tmp_path):
    tsv = tmp_path / "psgs.tsv"
    tsv.write_text("1\tsome text\tTitle\n", encoding="utf-8")
    with pytest.raises(SearchIndexError, match="header naming the columns id, text and title"):
        build_index(tsv, tmp_path / "index", progress=False)


def test_gzipped_jsonl_is_read(tmp_path):
    path = tmp_path / "tiny.jsonl.gz"
    path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in TINY).encode()))
    assert build_index(path, tmp_path / "index", progress=False).passages == 5


def test_broken_lines_are_skipped_and_reported_by_line_number(tmp_path, caplog):
    corpus = write_jsonl(
        tmp_path / "tiny.jsonl",
        TINY,
        extra={3: "{not json", 5: '{"id": "x", "title": "No text"}', 7: "[1, 2]"},
    )
    with caplog.at_level(logging.WARNING, logger="grouprl.envs.search"):
        report = build_index(corpus, tmp_path / "index", progress=False)
    assert report.passages == 5
    assert [number for number, _ in report.skipped] == [3, 5, 7]
    assert "not valid JSON" in report.skipped[0][1]
    assert "no 'text'" in report.skipped[1][1]
    assert "not an object" in report.skipped[2][1]
    assert "line 3: not valid JSON" in caplog.text and "skipped 3 broken lines" in caplog.text
    assert SearchIndex.load(tmp_path / "index").manifest["skipped_lines"] == 3


def test_corpus_with_no_usable_passage_fails_and_leaves_nothing(tmp_path):
    corpus = tmp_path / "bad.jsonl"
    corpus.write_text("{oops\n[]\n", encoding="utf-8")
    with pytest.raises(SearchIndexError, match="no usable passages") as err:
        build_index(corpus, tmp_path / "index", progress=False)
    assert "line 1: not valid JSON" in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl"]  # no temp or out dir


def test_build_is_atomic_and_replaces_an_old_index(tmp_path):
    corpus = write_jsonl(tmp_path / "tiny.jsonl", TINY)
    build_index(corpus, tmp_path / "index", progress=False)
    write_jsonl(corpus, TINY[:2])
    build_index(corpus, tmp_path / "index", progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index", "tiny.jsonl"]
    assert len(SearchIndex.load(tmp_path / "index")) == 2


def test_build_refuses_to_overwrite_a_directory_that_is_not_an_index(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(SearchIndexError, match="not a search index"):
        build_index(write_jsonl(tmp_path / "c.jsonl", TINY), tmp_path / "mine", progress=False)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_missing_index_is_a_user_error_naming_path_and_fix(tmp_path):
    with pytest.raises(SearchIndexError) as err:
        SearchIndex.load(tmp_path / "nowhere")
    assert err.value.user_error is True
    assert str(tmp_path / "nowhere") in str(err.value)
    assert "grouprl index build CORPUS OUT" in str(err.value)


@pytest.mark.parametrize("damage", [OFFSETS, PASSAGES, "vocab.index.json"])
def test_damaged_index_is_a_user_error(tmp_path, damage):
    build_index(write_jsonl(tmp_path / "c.jsonl", TINY), tmp_path / "index", progress=False)
    target = tmp_path / "index" / damage
    if damage == PASSAGES:
        target.write_text(target.read_text()[:-10])  # truncated
    else:
        target.unlink()
    with pytest.raises(SearchIndexError, match="is damaged") as err:
        SearchIndex.load(tmp_path / "index")
    assert err.value.user_error is True and "grouprl index build" in str(err.value)


def test_search_tool_signature_and_docstring():
    tool = make_search_tool(index=None)  # the index is only touched when called
    assert tool.__name__ == "search"
    signature = inspect.signature(tool)
    assert list(signature.parameters) == ["query"]
    assert signature.parameters["query"].annotation is str
    assert signature.return_annotation is str
    doc = inspect.getdoc(tool)
    assert doc.startswith("Search the encyclopedia for passages about a query.")
    assert "Args:\n    query: " in doc


def test_search_tool_formats_top_k_passages(tiny_index):
    tool = make_search_tool(tiny_index, k=2)
    reply = tool("Ostrel tram to the old fort")
    blocks = reply.split("\n\n")
    assert len(blocks) <= 2
    assert blocks[0] == f"[1] Ostrel tram\n{TINY[3]['text']}"
    assert all(block.startswith(f"[{n}] ") for n, block in enumerate(blocks, 1))
    assert tool("zebra") == "No passages found for 'zebra'; try other words."
    assert tool("   ").startswith("The query is empty")


def test_format_passages_cuts_long_text_at_a_word():
    long = Passage("a", "Long", "word " * 100, 1.0)
    short = Passage("b", "Short", "tiny text", 0.5)
    text = format_passages([long, short], max_chars=22)
    assert text == "[1] Long\nword word word word ...\n\n[2] Short\ntiny text"


def test_builtin_corpus_is_built_once_into_the_cache(tmp_path):
    first = resolve_corpus("builtin:fictional", cache_dir=tmp_path)
    built_at = (first / MANIFEST).stat().st_mtime_ns
    assert resolve_corpus("builtin:fictional", cache_dir=tmp_path) == first
    assert (first / MANIFEST).stat().st_mtime_ns == built_at
    assert resolve_corpus(str(first), cache_dir=tmp_path) == first
    with pytest.raises(SearchIndexError, match="not a built-in corpus"):
        resolve_corpus("builtin:nope", cache_dir=tmp_path)
    with pytest.raises(SearchIndexError, match="grouprl index build CORPUS OUT"):
        resolve_corpus(str(tmp_path / "missing"), cache_dir=tmp_path)


def test_cli_index_build_builtin_prints_count_and_out(tmp_path):
    out = tmp_path / "fictional-index"
    result = CliRunner().invoke(app, ["index", "build", "builtin:fictional", str(out)])
    assert result.exit_code == 0, result.output
    assert "indexed 500 passages from builtin:fictional" in result.output
    assert str(out) in result.output
    assert len(SearchIndex.load(out)) == 500


def test_cli_index_build_missing_corpus_exits_2(tmp_path):
    result = CliRunner().invoke(app, ["index", "build", str(tmp_path / "no.jsonl"), "out"])
    assert result.exit_code == 2
    assert "not found" in result.output and "Traceback" not in result.output
