"""Checks on the data rows themselves, before any model loads.

``grouprl plan`` and the start of ``grouprl train`` (``driver/preflight.py``) read the rows
of each local source (a file, a list of files, ``builtin:``, ``reasoning_gym:``): all of
them up to ``SAMPLE_ROWS``, else the first ``SAMPLE_ROWS`` (said in each message). A hub
dataset or a ``datasets`` directory is not read there (that needs ``datasets``); its
rows get the same checks as they load (``check_loaded_rows``, before the engine starts)::

    code_tests in reward.functions   rows carry tests it reads (rewards/code/row_check.py);
                                     none: refused; some: a warning naming them
    data.train                       at least data.batch_size usable rows (after broken
                                     rows and over-long prompts are skipped): fewer would
                                     repeat rows within every step
    single-turn prompts              their length in tokens against data.max_prompt_tokens,
                                     with model.path's tokenizer when it is a local
                                     directory (data/prompt_lengths.py): all over: refused;
                                     some over: a note (the run skips them)

Problems are messages that stop the run; notes are what ``grouprl plan`` prints below
its tables (row counts, prompt lengths, rows that will be skipped).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grouprl.assets import BUILTIN_PREFIX, resolve_model_path
from grouprl.config.model_data import DATA_FILE_SUFFIXES, REASONING_GYM_PREFIX, DataSource
from grouprl.config.schema import RunConfig
from grouprl.data.prompt_lengths import Lengths, prompt_lengths
from grouprl.data.sources import DataError, LoadReport, read_rows
from grouprl.rewards.code.row_check import ROW_FIELDS, reads_code_tests, tests_problem

logger = logging.getLogger(__name__)

SAMPLE_ROWS = 1_000
"""Rows read of each source before loading (all of a smaller one)."""


@dataclass
class RowFindings:
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def answer_fields(cfg: RunConfig) -> tuple[str, ...]:
    """Row fields that stand in for a missing ``data.answer_key`` value: code_tests' test
    fields, when it scores the run (a file may mix the documented test formats)."""
    return ROW_FIELDS if reads_code_tests(cfg.reward.functions) else ()


def row_findings(cfg: RunConfig) -> RowFindings:
    """The checks of the module docstring on each local source of ``cfg``. A source that
    does not read is left to ``data/peek.source_problems``, which names why; one not on
    this machine is not read (``_read_here``), so ``grouprl submit`` needs no flag here."""
    found = RowFindings()
    for key, source in (("data.train", cfg.data.train), ("data.eval", cfg.data.eval)):
        if source is None or not _read_here(source):
            continue
        try:
            rows, report = read_rows(
                source,
                prompt_key=cfg.data.prompt_key,
                answer_key=cfg.data.answer_key,
                config_key=key,
                answer_fields=answer_fields(cfg),
                max_rows=SAMPLE_ROWS,
            )
        except Exception as err:  # source_problems passed it: said, and left to the load
            found.notes.append(f"{key}: rows not checked before loading: {err}")
            continue
        read = _read_text(report)
        problems, warnings = _rows_problems(cfg, rows, config_key=key, read=read)
        found.problems += problems
        found.notes += warnings
        lengths = _lengths(cfg, rows)
        found.notes.append(_rows_note(key, report=report, lengths=lengths, cfg=cfg))
        kept = len(rows)
        if lengths is not None:
            over = lengths.over(cfg.data.max_prompt_tokens)
            kept -= len(over)
            if over and len(over) == len(rows):
                found.problems.append(_all_too_long(key, lengths=lengths, read=read, cfg=cfg))
                continue
        if key == "data.train" and report.complete and report.limit is None:
            found.problems += too_few_rows(kept, cfg=cfg, report=report)
    return found


def check_loaded_rows(cfg: RunConfig, rows: list[dict[str, Any]], *, config_key: str) -> None:
    """Rows that have loaded (a hub set's, at the start of a run, before the engine
    starts), over the first ``SAMPLE_ROWS``: raises ``DataError`` on a problem, logs a
    warning."""
    sample = rows[:SAMPLE_ROWS]
    read = f"the {len(rows):,} rows" if len(rows) <= SAMPLE_ROWS else f"the first {SAMPLE_ROWS:,}"
    problems, warnings = _rows_problems(cfg, sample, config_key=config_key, read=read)
    for warning in warnings:
        logger.warning("%s", warning)
    if problems:
        raise DataError(problems[0])


def too_few_rows(kept: int, *, cfg: RunConfig, report: LoadReport | None = None) -> list[str]:
    """A training set with fewer usable prompts than ``data.batch_size``: each step would
    take some of them more than once (the sampler crosses epochs), which is not what a
    batch size means. The fix names the numbers."""
    batch = cfg.data.batch_size
    if kept >= batch:
        return []
    skipped = ""
    if report is not None and (report.skipped or kept < report.kept):
        skipped = f" ({report.total} read; skipped: {report.summary(show=3)})"
    return [
        f"data.train has {kept} usable prompt{'s' * (kept != 1)}{skipped}, fewer than "
        f"data.batch_size={batch} prompts per step: every step would repeat rows. Fix: "
        f"set data.batch_size={max(kept, 1)} or less (train.mini_batch_size must divide "
        "data.batch_size x rollout.n), or add rows (or fix the skipped ones)."
    ]


def _read_here(source: DataSource) -> bool:
    """Whether ``source`` reads without ``datasets`` or the network."""
    names = [source.source] if isinstance(source.source, str) else source.files
    for name in names:
        if name.startswith((BUILTIN_PREFIX, REASONING_GYM_PREFIX)):
            continue
        path = Path(name).expanduser()
        if path.suffix not in DATA_FILE_SUFFIXES or not path.is_file():
            return False
    return True


def _read_text(report: LoadReport) -> str:
    return f"the {report.total:,} rows" if report.complete else f"the first {report.total:,} rows"


def _rows_problems(
    cfg: RunConfig, rows: list[dict[str, Any]], *, config_key: str, read: str
) -> tuple[list[str], list[str]]:
    if not rows or not reads_code_tests(cfg.reward.functions):
        return [], []
    problem, warning = tests_problem(
        rows, config_key=config_key, answer_key=cfg.data.answer_key, read=read
    )
    return [problem] if problem else [], [warning] if warning else []


def _lengths(cfg: RunConfig, rows: list[dict[str, Any]]) -> Lengths | None:
    """Prompt lengths with model.path's tokenizer: a shipped model or a local directory,
    single-turn prompts only (an environment's opening is its own)."""
    path = cfg.model.path
    if cfg.env.name != "single_turn" or not rows:
        return None
    if not path.startswith(BUILTIN_PREFIX) and not Path(path).expanduser().is_dir():
        return None  # a hub model: its tokenizer is not read before loading
    try:
        model_dir = Path(resolve_model_path(path)).expanduser()
        return prompt_lengths(model_dir, rows, data=cfg.data)
    except Exception:  # a prompt that does not render: the load reports it
        return None


def _rows_note(key: str, *, report: LoadReport, lengths: Lengths | None, cfg: RunConfig) -> str:
    count = f"{report.kept:,} rows"
    if not report.complete:
        count += f" of the first {report.total:,} read"
    if report.skipped:
        count += f" ({len(report.skipped)} broken, skipped)"
    if lengths is None:
        return f"{key}: {count}; prompt lengths are measured as the run loads"
    longest_row, longest = lengths.longest()
    limit = cfg.data.max_prompt_tokens
    over = lengths.over(limit)
    text = (
        f"{key}: {count}; prompts {min(lengths.tokens)}-{longest} tokens (longest: row "
        f"{longest_row}), data.max_prompt_tokens={limit}"
    )
    if over:
        text += (
            f": {len(over)} longer, skipped by the run (keep them: data.max_prompt_tokens="
            f"{longest})"
        )
    return text


def _all_too_long(key: str, *, lengths: Lengths, read: str, cfg: RunConfig) -> str:
    longest_row, longest = lengths.longest()
    limit = cfg.data.max_prompt_tokens
    return (
        f"{key}: every prompt of {read} is longer than data.max_prompt_tokens={limit} "
        f"(shortest {min(lengths.tokens)} tokens, longest {longest}: row {longest_row}; "
        f"model.path's chat template{', data.system_prompt' * bool(cfg.data.system_prompt)} "
        "included), so the run would skip them all. Fix: set data.max_prompt_tokens="
        f"{longest} or more, with rollout.max_model_len >= it + rollout.max_tokens="
        f"{cfg.rollout.max_tokens}, or shorten the prompts."
    )
