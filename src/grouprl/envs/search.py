"""BM25 passage search for tool-use agents: build an index once, load it, query it.

::

    corpus (.jsonl id/title/text, DPR .tsv id/text/title, optionally .gz, or builtin:NAME)
      │  read line by line; a broken line is skipped and reported with its number
      ▼
    OUT.building-*/  passages.jsonl + offsets.npy   (text returned by search)
                     bm25s index files              (title + text, tokenised)
                     manifest.json                  (written last)
      │  renamed to OUT only when complete, so a crashed build leaves no half index
      ▼
    SearchIndex.load(OUT).search(query, k) -> [Passage(id, title, text, score)]
    make_search_tool(index) -> search(query: str) -> str   (the agent's tool)

Tokenisation is bm25s's: lower case, words of two or more letters or digits,
English stopwords removed, and no stemming. Stemming needs PyStemmer (a
compiled extra we do not depend on); without it "inventors" does not match
"inventor", which matters little for the name-heavy questions agents ask.
Passages stay on disk and are read by byte offset, so a Wikipedia-sized corpus
does not have to fit in memory at query time (building it still holds the
token ids of every passage in memory, as bm25s does).
"""

import csv
import gzip
import hashlib
import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
PASSAGES = "passages.jsonl"
OFFSETS = "offsets.npy"
TOKEN_PATTERN = r"(?u)\b\w\w+\b"
STOPWORDS = "en"
CHUNK = 10_000
"""Passages tokenised at a time while reading (the progress bar moves per chunk)."""
DEFAULT_MAX_CHARS = 800
"""Per passage in the search tool's reply: about 130 words, a little more than a DPR passage."""
BUILD_HINT = "grouprl index build CORPUS OUT"


class SearchIndexError(ValueError):
    """A corpus or index that cannot be used; the message names the path and the fix."""

    user_error = True


@dataclass(frozen=True)
class Passage:
    id: str
    title: str
    text: str
    score: float


@dataclass
class BuildReport:
    """What a build read, kept and skipped (line number and reason), and where it went."""

    source: str
    out_dir: Path
    passages: int = 0
    skipped: list[tuple[int, str]] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self, *, show: int = 5) -> str:
        head = f"{self.source}: indexed {self.passages} passages"
        if not self.skipped:
            return head
        shown = "; ".join(f"line {n}: {reason}" for n, reason in self.skipped[:show])
        more = f"; ... {len(self.skipped) - show} more" if len(self.skipped) > show else ""
        return f"{head}, skipped {len(self.skipped)} broken lines ({shown}{more})"


# --- built-in corpora ----------------------------------------------------------------------


def _fictional_passages() -> list[dict[str, str]]:
    from grouprl.assets.fictional import passages

    return passages()


BUILTIN_CORPORA: dict[str, Callable[[], list[dict[str, str]]]] = {
    "builtin:fictional": _fictional_passages
}


def resolve_corpus(corpus: str, *, cache_dir: str | Path) -> Path:
    """The index directory for ``corpus``: a built-in corpus (indexed once into ``cache_dir``,
    e.g. ``runs/.cache``, and reused while its passages are unchanged) or a built index."""
    if corpus.startswith("builtin:"):
        passages = _builtin_passages(corpus)
        digest = hashlib.sha256(json.dumps(passages, sort_keys=True).encode()).hexdigest()[:12]
        out = Path(cache_dir) / f"index-{corpus.removeprefix('builtin:')}-{digest}"
        if not (out / MANIFEST).is_file():
            build_index(corpus, out, progress=False)
        return out
    path = Path(corpus).expanduser()
    if (path / MANIFEST).is_file():
        return path
    raise SearchIndexError(
        f"{corpus!r} is not a search index (no {MANIFEST} in it). Build one with "
        f"`{BUILD_HINT}` and pass OUT, or use one of {list(BUILTIN_CORPORA)}"
    )


def _builtin_passages(name: str) -> list[dict[str, str]]:
    if name not in BUILTIN_CORPORA:
        raise SearchIndexError(
            f"{name!r} is not a built-in corpus; choose one of {list(BUILTIN_CORPORA)}"
        )
    return BUILTIN_CORPORA[name]()


# --- reading a corpus ----------------------------------------------------------------------


def _read_corpus(path: Path, report: BuildReport) -> tuple[int, Iterator[tuple[dict, int]]]:
    """Progress total (bytes of the file) and an iterator of (record, bytes read so far)."""
    if not path.is_file():
        raise SearchIndexError(
            f"corpus {str(path)!r} not found (looked in {path.resolve()}). Pass a .jsonl or DPR "
            f".tsv passage file, or one of {list(BUILTIN_CORPORA)}"
        )
    suffixes = path.suffixes[-2:] if path.suffix == ".gz" else path.suffixes[-1:]
    kind = suffixes[0] if suffixes else ""
    if kind not in (".jsonl", ".tsv"):
        raise SearchIndexError(
            f"corpus {str(path)!r}: unknown format {''.join(suffixes) or '(no suffix)'!r}; "
            "expected .jsonl (one {id, title, text} object per line) or DPR's .tsv "
            "(id<TAB>text<TAB>title with a header row), either optionally .gz"
        )
    return path.stat().st_size, _records(path, kind=kind, report=report)


def _records(path: Path, *, kind: str, report: BuildReport) -> Iterator[tuple[dict, int]]:
    header: list[str] | None = None
    with open(path, "rb") as raw:
        stream = gzip.GzipFile(fileobj=raw) if path.suffix == ".gz" else raw
        for number, data in enumerate(stream, 1):
            try:
                line = data.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as err:
                report.skipped.append((number, f"not UTF-8 ({err.reason})"))
                continue
            if not line.strip():
                continue
            if kind == ".tsv" and header is None:
                header = _tsv_header(line, path)
                continue
            record = _parse_tsv(line, header) if header else _parse_json(line)
            if isinstance(record, str):  # a line that does not parse: why
                report.skipped.append((number, record))
                continue
            problem = _record_problem(record)
            if problem is not None:
                report.skipped.append((number, problem))
                continue
            yield record, raw.tell()


def _tsv_header(line: str, path: Path) -> list[str]:
    header = next(csv.reader([line], delimiter="\t"))
    if not {"id", "text", "title"} <= set(header):
        raise SearchIndexError(
            f"corpus {str(path)!r}: the first line {header[:5]} is not a header naming the "
            "columns id, text and title (DPR's psgs_w100.tsv starts with id<TAB>text<TAB>title)"
        )
    return header


def _parse_tsv(line: str, header: list[str]) -> dict | str:
    fields = next(csv.reader([line], delimiter="\t"))
    if len(fields) != len(header):
        return f"{len(fields)} tab-separated fields, expected {len(header)} ({header})"
    return dict(zip(header, fields, strict=True))


def _parse_json(line: str) -> dict | str:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        return f"not valid JSON ({err.msg})"
    if not isinstance(record, dict):
        return f"a JSON {type(record).__name__}, not an object"
    return record


def _record_problem(record: dict) -> str | None:
    pid, title, text = record.get("id"), record.get("title") or "", record.get("text")
    if isinstance(pid, bool) or not isinstance(pid, str | int) or str(pid) == "":
        return "no 'id' (a string or integer)"
    if not isinstance(title, str):
        return f"'title' is {type(title).__name__}, not text"
    if not isinstance(text, str) or not text.strip():
        return "no 'text' (missing, empty or not a string)"
    return None


# --- building ------------------------------------------------------------------------------


def build_index(corpus: str | Path, out_dir: str | Path, *, progress: bool = True) -> BuildReport:
    """Index ``corpus`` (a passage file or ``builtin:NAME``) with BM25 into ``out_dir``.

    ``out_dir`` is replaced when it already holds an index (or is empty); any other
    existing directory is refused rather than overwritten.
    """
    import bm25s
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    start = time.perf_counter()
    out = Path(out_dir).expanduser()
    _check_target(out)
    report = BuildReport(source=str(corpus), out_dir=out)
    if isinstance(corpus, str) and corpus.startswith("builtin:"):
        passages = _builtin_passages(corpus)
        total, records = len(passages), ((p, i + 1) for i, p in enumerate(passages))
    else:
        total, records = _read_corpus(Path(corpus).expanduser(), report)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.building-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    bar = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}% {task.fields[count]}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
        disable=not progress,
    )
    try:
        with bar:
            task = bar.add_task("reading", total=total, count="")
            ids, vocab = _write_passages(records, tmp, report, bar=bar, task=task)
            if report.passages == 0:
                raise SearchIndexError(f"{report.summary()}: no usable passages, nothing to index")
            bar.update(task, description="indexing", completed=total)
            retriever = bm25s.BM25()
            retriever.index((ids, vocab), show_progress=False)
            retriever.save(str(tmp), show_progress=False)
        report.seconds = time.perf_counter() - start
        _write_manifest(tmp, report, bm25s_version=bm25s.__version__)
        _install(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if report.skipped:
        logger.warning("%s", report.summary())
    return report


def _write_passages(
    records: Iterator[tuple[dict, int]], tmp: Path, report: BuildReport, *, bar: Any, task: Any
) -> tuple[list[list[int]], dict[str, int]]:
    """Store the passages with their byte offsets; return the token ids of title + text."""
    import numpy as np
    from bm25s.tokenization import Tokenizer

    tokenizer = Tokenizer(lower=True, splitter=TOKEN_PATTERN, stopwords=STOPWORDS)
    ids: list[list[int]] = []
    offsets = [0]
    pending: list[str] = []

    def flush() -> None:
        tokens = tokenizer.tokenize(
            pending, update_vocab=True, return_as="ids", show_progress=False
        )
        ids.extend(cast("list[list[int]]", tokens))  # return_as="ids": one list per text
        pending.clear()

    with open(tmp / PASSAGES, "wb") as sink:
        for record, position in records:
            title, text = record.get("title") or "", record["text"].strip()
            passage = {"id": str(record["id"]), "title": title, "text": text}
            line = json.dumps(passage, ensure_ascii=False).encode("utf-8") + b"\n"
            sink.write(line)
            offsets.append(offsets[-1] + len(line))
            pending.append(f"{passage['title']}\n{passage['text']}")
            report.passages += 1
            if len(pending) >= CHUNK:
                flush()
                bar.update(task, completed=position, count=f"{report.passages:,} passages")
        if pending:
            flush()
    np.save(tmp / OFFSETS, np.asarray(offsets, dtype=np.int64))
    return ids, tokenizer.get_vocab_dict()


def _write_manifest(tmp: Path, report: BuildReport, *, bm25s_version: str) -> None:
    manifest = {
        "format": FORMAT_VERSION,
        "passages": report.passages,
        "source": report.source,
        "skipped_lines": len(report.skipped),
        "bm25s_version": bm25s_version,
        "tokenizer": {"lower": True, "pattern": TOKEN_PATTERN, "stopwords": STOPWORDS},
        "stemmer": None,
        "built_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "build_seconds": round(report.seconds, 3),
    }
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")


def _check_target(out: Path) -> None:
    if out.exists() and not (out.is_dir() and (_is_index(out) or not any(out.iterdir()))):
        raise SearchIndexError(
            f"{str(out)!r} exists and is not a search index; choose a new OUT directory "
            "or remove it (an existing index is replaced, other files are never overwritten)"
        )


def _is_index(path: Path) -> bool:
    return (path / MANIFEST).is_file()


def _install(tmp: Path, out: Path) -> None:
    """Move the finished build to ``out``, replacing an older index there."""
    old = None
    if out.exists():
        old = out.parent / f".{out.name}.old-{uuid.uuid4().hex[:8]}"
        os.replace(out, old)
    os.replace(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


# --- searching -----------------------------------------------------------------------------


class SearchIndex:
    """A built index: ``search(query, k)`` returns the best passages, best first."""

    def __init__(self, path: Path, retriever: Any, offsets: Any, manifest: dict) -> None:
        self.path = path
        self.manifest = manifest
        self._retriever = retriever
        self._offsets = offsets
        self._vocab: dict[str, int] = retriever.vocab_dict

    def __len__(self) -> int:
        return len(self._offsets) - 1

    @classmethod
    def load(cls, path: str | Path, *, mmap: bool = False) -> "SearchIndex":
        """Open the index in ``path`` (``mmap`` keeps the score matrix on disk)."""
        import bm25s
        import numpy as np

        path = Path(path).expanduser()
        if not _is_index(path):
            raise SearchIndexError(
                f"no search index at {str(path)!r} (no {MANIFEST}); build it with "
                f"`{BUILD_HINT}`, e.g. `grouprl index build builtin:fictional {path}`"
            )
        try:
            manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
            if manifest.get("format") != FORMAT_VERSION:
                raise ValueError(f"format {manifest.get('format')!r}, expected {FORMAT_VERSION}")
            offsets = np.load(path / OFFSETS)
            retriever = bm25s.BM25.load(str(path), mmap=mmap, show_progress=False)
            size = (path / PASSAGES).stat().st_size
            if len(offsets) != manifest["passages"] + 1 or offsets[-1] != size:
                raise ValueError(f"{PASSAGES} does not match {OFFSETS} and {MANIFEST}")
        except Exception as err:  # json, numpy and bm25s each raise their own types
            raise SearchIndexError(
                f"the search index at {str(path)!r} is damaged ({type(err).__name__}: {err}); "
                f"rebuild it with `{BUILD_HINT}`"
            ) from err
        return cls(path, retriever, offsets, manifest)

    def search(self, query: str, k: int = 3) -> list[Passage]:
        """Up to ``k`` passages sharing a word with ``query``, best BM25 score first."""
        import bm25s

        tokens = bm25s.tokenize(
            [query], token_pattern=TOKEN_PATTERN, stopwords=STOPWORDS, return_ids=False,
            show_progress=False,
        )[0]  # fmt: skip
        query_ids = [self._vocab[t] for t in tokens if t in self._vocab]
        if not query_ids or k < 1:
            return []
        found = self._retriever.retrieve([query_ids], k=min(k, len(self)), show_progress=False)
        hits = []
        for doc, score in zip(found.documents[0], found.scores[0], strict=True):
            if score <= 0:  # a query word absent from every remaining document
                break
            hits.append(self._passage(int(doc), float(score)))
        return hits

    def _passage(self, number: int, score: float) -> Passage:
        start, end = int(self._offsets[number]), int(self._offsets[number + 1])
        with open(self.path / PASSAGES, "rb") as f:
            f.seek(start)
            record = json.loads(f.read(end - start))
        return Passage(id=record["id"], title=record["title"], text=record["text"], score=score)


def format_passages(passages: list[Passage], *, max_chars: int = DEFAULT_MAX_CHARS) -> str:
    """``[1] Title\\ntext\\n\\n[2] ...``; a text longer than ``max_chars`` is cut at a word."""
    blocks = []
    for number, passage in enumerate(passages, 1):
        text = passage.text
        if len(text) > max_chars:
            text = text[:max_chars].rsplit(" ", 1)[0].rstrip() + " ..."
        blocks.append(f"[{number}] {passage.title}\n{text}")
    return "\n\n".join(blocks)


def make_search_tool(
    index: SearchIndex, k: int = 3, max_chars: int = DEFAULT_MAX_CHARS
) -> Callable[[str], str]:
    """The agent's tool: ``search(query: str) -> str`` over ``index``, returning the top ``k``
    passages as numbered text. It never raises on a bad query; it says what went wrong."""

    def search(query: str) -> str:
        """Search the encyclopedia for passages about a query.

        Args:
            query: What to look up: a name, a place, a thing or a short question.

        Returns:
            The best matching passages, numbered, each as its title and text.
        """
        if not isinstance(query, str) or not query.strip():
            return "The query is empty; search for a name, a place or a topic."
        hits = index.search(query, k=k)
        if not hits:
            return f"No passages found for {query!r}; try other words."
        return format_passages(hits, max_chars=max_chars)

    return search
