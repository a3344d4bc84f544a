"""The ``llm_judge`` reward: a second model reads each sample through a prompt template
and its answer, parsed by a rule, is the score.

::

    row + completion ──template──► one user message ──► the judge ──► its answer
        url:  an OpenAI-compatible server: POST {url}/chat/completions (timeout_s,
              retries with backoff on timeouts, 5xx and 429; concurrency requests at once)
        path: a local model the reward worker loads (transformers, greedy, its chat
              template; no network)
    answer ──parse──► number: the first number (in range, if given)
                      labels: the first word, looked up in labels ({"yes": 1, "no": 0})
                      regex:  pattern's one group, a number (in range, if given)
           ──► the score; or SampleFailed(kind): that sample alone is a reward failure
               (left out of training per reward.on_error, counted per kind), never a 0

Used as ``reward.functions: [{name: llm_judge, args: {path: builtin:tiny-arith-judge,
template: ..., parse: labels, labels: {"yes": 1, "no": 0}}}]`` (docs/judges.md).

One call per prompt group (``DeclaresScope``): a group's requests go out together,
``concurrency`` at once in each reward worker (the run's bound is
``reward.sandbox.workers`` times it); a local judge answers the group in one batch. A
sample whose request fails or whose answer does not parse fails alone
(``failures.SampleFailed``); its group's other samples keep their scores.

Template fields: ``{completion}`` (required), ``{reference}`` (the row's
``data.answer_key`` value) and any column of the row by its name (``{question}``; a
conversation column renders as its last user message). ``{{`` and ``}}`` are braces.
The config-time checks are in ``judge_checks.py``; the HTTP client and the local model in
``judge_client.py`` (torch and transformers imported there, in the worker, never here).
"""

from __future__ import annotations

import math
import re
import string
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from grouprl.rewards import judge_client
from grouprl.rewards.failures import SampleFailed
from grouprl.rewards.judge_client import JudgeError

Parse = Literal["number", "labels", "regex"]

SAMPLE_FIELDS = ("completion", "reference")
"""Template fields that are the sample's own; every other field is a row column."""

_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")


@dataclass(frozen=True, kw_only=True)
class LLMJudge:
    """Scores each sample by asking a judge model (module docstring). Callable as a
    grouprl group reward; its fields are ``reward.functions[i].args``."""

    url: str | None = None
    """An OpenAI-compatible API's base URL, ``http://127.0.0.1:8000/v1`` (needs
    ``reward.network: true``); or give ``path``."""
    model: str | None = None
    """The served model's name (``url`` only; required with it)."""
    path: str | None = None
    """A local judge: a model directory, ``builtin:NAME`` or a downloaded hub name; each
    reward worker loads it on its CPU and answers greedily."""
    template: str = ""
    """The question sent as one user message; must contain ``{completion}``."""
    parse: Parse = "labels"
    """How the answer becomes a score: ``number``, ``labels`` or ``regex``."""
    labels: dict[Any, float] | None = None
    """``parse: labels``: the answer's first word (case and punctuation around it ignored)
    to its score, ``{"yes": 1, "no": 0}``; quote yes/no in YAML (read bare, they are
    booleans)."""
    pattern: str | None = None
    """``parse: regex``: searched in the answer; its one group is the number."""
    range: list[float] | None = None
    """``number``/``regex``: ``[low, high]``; a number outside is a parse failure."""
    timeout_s: float = 10.0
    """Seconds one request may take (``url``)."""
    retries: int = 2
    """Further tries of a request that timed out or got a 5xx or 429 (``url``)."""
    backoff_s: float = 1.0
    """The wait before retry k (from 0) is ``backoff_s * 2**k`` (``url``; a 429's
    Retry-After, when longer and under ``timeout_s``, instead)."""
    concurrency: int = 8
    """Requests in flight at once in one reward worker (``url``)."""
    max_tokens: int = 16
    """Tokens the judge may answer with."""
    temperature: float = 0.0
    """The judge's sampling temperature (``url``; a local judge is greedy: 0 only)."""

    scope: ClassVar[Literal["group"]] = "group"
    """One call per prompt group (``declares.DeclaresScope``)."""
    learned: ClassVar[bool] = True
    """A learned signal: the run logs its agreement with ``reward.correct_function``."""

    def __post_init__(self) -> None:
        for problem in self.value_problems():  # (the settings together: setting_problems)
            raise ValueError(problem)

    def setting_problems(self) -> list[str]:
        """Why these settings together do not make a judge (each names its settings), []
        when they do; the config check (``judge_checks``) and each call ask."""
        problems = []
        if (self.url is None) == (self.path is None):
            problems.append(
                f"url={self.url!r}, path={self.path!r}: a judge is exactly one of url (an "
                "OpenAI-compatible server's base URL) and path (a local model). Fix: set one"
            )
        if self.url is not None and not self.model:
            problems.append(
                f"model={self.model!r} with url={self.url!r}: the request names the served "
                "model. Fix: set model to one that GET {url}/models lists"
            )
        if self.path is not None and self.temperature != 0:
            problems.append(
                f"temperature={self.temperature:g} with path: a local judge answers "
                "greedily. Fix: remove temperature (0)"
            )
        for key, given, rule in (
            ("labels", self.labels, "labels"),
            ("pattern", self.pattern, "regex"),
        ):
            if (self.parse == rule) != (given is not None):
                problems.append(
                    f"{key}={given!r} with parse={self.parse!r}: {key} goes with parse: "
                    f"{rule}, and only with it. Fix: set both, or neither"
                )
        if self.range is not None and self.parse == "labels":
            problems.append(
                f"range={self.range} with parse='labels': a range bounds a number (parse: "
                "number or regex). Fix: remove range"
            )
        return problems + template_problems(self.template)

    def value_problems(self) -> list[str]:
        """Why a setting's value is wrong by itself (refused as it is set)."""
        problems = self._parse_problems()
        for name, value, low in (
            ("timeout_s", self.timeout_s, 1e-9),
            ("retries", self.retries, 0),
            ("backoff_s", self.backoff_s, 0),
            ("concurrency", self.concurrency, 1),
            ("max_tokens", self.max_tokens, 1),
            ("temperature", self.temperature, 0),
        ):
            if value < low:
                problems.append(f"{name}={value}: must be {low:g} or more")
        return problems

    def _parse_problems(self) -> list[str]:
        problems = []
        if self.parse not in ("number", "labels", "regex"):
            return [f"parse={self.parse!r}: must be number, labels or regex"]
        if self.range is not None and (len(self.range) != 2 or self.range[0] > self.range[1]):
            problems.append(f"range={self.range}: give [low, high], low <= high")
        if self.labels is not None:
            problems += _label_problems(self.labels)
        if self.pattern is not None:
            try:
                groups = re.compile(self.pattern).groups
            except re.error as err:
                problems.append(f"pattern={self.pattern!r} does not compile: {err}")
            else:
                if groups != 1:
                    problems.append(f"pattern={self.pattern!r} has {groups} groups, not 1")
        return problems

    def call_s(self) -> tuple[float, str]:
        """The most seconds a request takes with its retries and waits (``url``;
        ``declares.NeedsSeconds``), plus 2 s; a local judge declares none."""
        if self.url is None:
            return 0.0, "timeout_s"
        waits = sum(self.backoff_s * 2**k for k in range(self.retries))
        return self.timeout_s * (self.retries + 1) + waits + 2.0, "timeout_s"

    def warm_up(self) -> None:
        """A local judge loads once per reward worker (``declares.WarmsUp``)."""
        if self.path is not None:
            judge_client.local_judge(self.path)

    def __call__(
        self,
        completions: list[str],
        *,
        references: list[Any] | None = None,
        rows: list[dict[str, Any]] | None = None,
        **kwargs: object,
    ) -> list[float | SampleFailed]:
        """A score per completion of a prompt group, or ``SampleFailed`` for one the judge
        could not score (a request that failed, an answer that did not parse)."""
        if problems := self.setting_problems():  # (the config check refuses these first)
            raise ValueError(f"llm_judge: {'; '.join(problems)}")
        references = references or [None] * len(completions)
        rows = rows or [{} for _ in completions]
        questions = [
            render(self.template, c, reference=r, row=row)
            for c, r, row in zip(completions, references, rows, strict=True)
        ]
        answers = self._ask(questions)
        out: list[float | SampleFailed] = []
        for answer in answers:
            if isinstance(answer, JudgeError):
                out.append(answer.failed())
                continue
            try:
                out.append(self.score(answer))
            except JudgeError as err:
                out.append(err.failed())
        return out

    def _ask(self, questions: list[str]) -> list[str | JudgeError]:
        if self.path is not None:
            return judge_client.local_judge(self.path).answer(questions, self.max_tokens)
        workers = max(1, min(self.concurrency, len(questions)))
        with ThreadPoolExecutor(workers, thread_name_prefix="grouprl-judge") as pool:
            return list(pool.map(self._ask_server, questions))

    def _ask_server(self, question: str) -> str | JudgeError:
        return judge_client.ask_server(
            question,
            url=self.url or "",
            model=self.model or "",
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            timeout_s=self.timeout_s,
            retries=self.retries,
            backoff_s=self.backoff_s,
        )

    def score(self, answer: str) -> float:
        """``answer`` parsed by the rule (``parse``); raises ``JudgeError`` (``refusal``:
        empty or no label; ``parse``: no number, out of range) when it yields none."""
        text = answer.strip()
        if not text:
            raise JudgeError("refusal", "the judge answered nothing", "JudgeRefused")
        if self.parse == "labels":
            return _label(text, self.labels or {})
        if self.parse == "regex":
            match = re.search(self.pattern or "", text)
            if match is None:
                raise JudgeError(
                    "parse", f"pattern {self.pattern!r} not found in {text!r:.200}", "JudgeParse"
                )
            found = (match.group(1) or "").strip()
            if not _NUMBER.fullmatch(found):
                raise JudgeError("parse", f"the group is {found!r:.80}, not a number", "JudgeParse")
            return self._in_range(float(found), text)
        match = _NUMBER.search(text)
        if match is None:
            raise JudgeError("parse", f"no number in the answer {text!r:.200}", "JudgeParse")
        return self._in_range(float(match.group()), text)

    def _in_range(self, value: float, text: str) -> float:
        if not math.isfinite(value) or (
            self.range is not None and not self.range[0] <= value <= self.range[1]
        ):
            allowed = "finite" if self.range is None else f"within {self.range}"
            raise JudgeError(
                "parse", f"{value:g} is not {allowed} (answer {text!r:.200})", "JudgeParse"
            )
        return value


def _label(text: str, labels: dict[Any, float]) -> float:
    """The score of ``text``'s first word (lowercased, punctuation around it stripped)."""
    word = text.split()[0].strip(string.punctuation).lower()
    by_word = {str(k).lower(): float(v) for k, v in labels.items()}
    if word in by_word:
        return by_word[word]
    raise JudgeError(
        "refusal",
        f"the answer's first word {word!r} is none of the labels {sorted(by_word)} "
        f"(answer {text!r:.200})",
        "JudgeRefused",
    )


def _label_problems(labels: dict[Any, float]) -> list[str]:
    problems = []
    if not labels:
        problems.append("labels={}: give at least one, {'yes': 1, 'no': 0}")
    for key, value in labels.items():
        if isinstance(key, bool):
            problems.append(
                f"labels has the key {key!r}: YAML reads a bare yes/no (or on/off) as a "
                "boolean; quote the words, labels: {'yes': 1, 'no': 0}"
            )
        elif not isinstance(key, str) or len(key.split()) != 1:
            problems.append(f"labels key {key!r}: one word (the answer's first is matched)")
        if isinstance(value, bool) or not isinstance(value, int | float):
            problems.append(f"labels[{key!r}]={value!r}: a number")
    return problems


def template_fields(template: str) -> list[str]:
    """The field names ``template`` uses (``{name}``), in order, once each."""
    names: list[str] = []
    for _, name, _, _ in string.Formatter().parse(template):
        if name is not None and name not in names:
            names.append(name)
    return names


def template_problems(template: str) -> list[str]:
    """Why ``template`` cannot be rendered per sample: none, no ``{completion}``, a field
    that is not a plain name (``{0}``, ``{row.x}``, ``{x!r}``), or braces that do not pair."""
    fix = "Fix: write the question with {completion} where the answer goes"
    if not template:
        return [f"template='' (not set): the judge's question is required. {fix}"]
    try:
        fields = template_fields(template)
        parts = list(string.Formatter().parse(template))
    except ValueError as err:
        return [
            f"template={template!r:.120} does not parse ({err}). Fix: write a literal "
            "brace as {{ or }}"
        ]
    problems = []
    for _, name, spec, conversion in parts:
        if name is not None and (not name.isidentifier() or spec or conversion):
            field = name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "")
            problems.append(
                f"template has the field {{{field}}}, not a plain name. Allowed: {{completion}}, "
                "{reference} and the row's columns by name. Fix: use one of them"
            )
    if "completion" not in fields:
        problems.append(f"template={template!r:.120} has no {{completion}} field. {fix}")
    return problems


def render(template: str, completion: str, *, reference: object, row: dict[str, Any]) -> str:
    """``template`` with the sample's fields: ``completion``, ``reference`` (None: an
    empty string) and the row's columns (a conversation: its last user message)."""
    values = {k: _text(v) for k, v in row.items() if isinstance(k, str)}
    values |= {"completion": completion, "reference": "" if reference is None else _text(reference)}
    try:
        return template.format_map(values)
    except KeyError as err:
        raise KeyError(
            f"llm_judge template field {err} is not a column of this row (columns: "
            f"{sorted(k for k in row if not str(k).startswith('_'))}); fields are "
            "{completion}, {reference} and the row's columns"
        ) from None


def _text(value: object) -> str:
    if isinstance(value, list) and value and all(isinstance(m, dict) for m in value):
        users = [m.get("content") for m in value if m.get("role") == "user"]
        return str(users[-1] if users else value[-1].get("content", ""))
    return str(value)


llm_judge = LLMJudge()
"""The registered ``llm_judge``: its args set the judge, the template and the rule."""
