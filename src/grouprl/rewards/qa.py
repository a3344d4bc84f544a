"""Question-answering rewards: exact match and token F1 against a list of answer aliases.

Contract. The model's answer is the text inside the last ``<answer>...</answer>``
pair of the completion (it may span lines; surrounding whitespace is stripped;
anything after the closing tag, such as ``<|im_end|>``, is ignored). No tag
pair, or an answer that normalises to nothing, scores 0.0. Both sides are
normalised with ``normalize_answer`` before comparing, and the score is the
best over the reference's aliases::

    completion                                            reference         qa_em  qa_f1
    "<think>..</think><answer>The Eiffel Tower</answer>"  ["Eiffel Tower"]  1.0    1.0
    "<answer>big red dog</answer><|im_end|>"              "the red dog"     0.0    0.8
    "<answer>Paris</answer> ... <answer>Lyon</answer>"    "Paris"           0.0    0.0
    "Paris"                                               "Paris"           0.0    0.0

The reference (the row's ``data.answer_key`` value) may be a string, a list of
strings, or a TriviaQA ``answer`` record, whose ``aliases``, ``normalized_aliases``,
``value`` and ``normalized_value`` all count as aliases. TriviaQA rows therefore
load as-is: ``data.prompt_key=question data.answer_key=answer`` passes the whole
answer record, and a dotted key such as ``data.answer_key=answer.aliases`` passes
just that list (the data loader reads dotted keys as nested fields). A number is
read as its decimal text (``1969`` -> ``"1969"``).

Departures from the SQuAD v1.1 / TriviaQA evaluation scripts, which score an
empty prediction against an empty gold answer as a match: here an empty answer
never scores, and aliases that normalise to nothing (``"The"``) are dropped, so
that an empty ``<answer></answer>`` cannot earn reward.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable
from typing import Any

_ARTICLES = re.compile(r"\b(?:a|an|the)\b")
_DROP_PUNCTUATION = str.maketrans("", "", string.punctuation)
_OPEN, _CLOSE = "<answer>", "</answer>"
_TRIVIAQA_LIST_FIELDS = ("aliases", "normalized_aliases")
_TRIVIAQA_TEXT_FIELDS = ("value", "normalized_value")
_ACCEPTED = (
    "a string, a list of strings, or a TriviaQA answer record (a dict with "
    "'aliases', 'normalized_aliases', 'value' or 'normalized_value')"
)


def normalize_answer(text: str) -> str:
    """``text`` as SQuAD v1.1 compares answers: ``"The  Eiffel Tower!"`` -> ``"eiffel tower"``.

    In order: lowercase; delete every ASCII punctuation character (``string.punctuation``,
    so ``"U.S.A."`` -> ``"usa"``); replace the whole words ``a``, ``an`` and ``the`` with
    spaces; collapse runs of whitespace to one space and strip the ends. TriviaQA's own
    evaluation applies the same steps, except that it turns punctuation, underscores and
    curly quotes into spaces instead of deleting them; its ``normalized_aliases`` were made
    that way, which is why the raw ``aliases`` are compared too.
    """
    text = text.lower().translate(_DROP_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def extract_answer(completion: str) -> str | None:
    """The stripped text inside the last ``<answer>...</answer>`` pair, or None if there is none.

    "Last pair" is the last closing tag and the nearest opening tag before it, so a stray
    unclosed ``<answer>`` earlier in the text does not swallow the final answer.
    """
    end = completion.rfind(_CLOSE)
    if end < 0:
        return None
    start = completion.rfind(_OPEN, 0, end)
    if start < 0:
        return None
    return completion[start + len(_OPEN) : end].strip()


def answer_aliases(reference: object) -> list[str]:
    """The reference's answers as a list of strings, duplicates removed, first order kept.

    ``"Paris"`` -> ``["Paris"]``; ``["Paris", "City of Light"]`` -> the same list; a
    TriviaQA answer record -> its ``aliases``, then ``normalized_aliases``, then ``value``
    and ``normalized_value`` where present. Anything else, or no aliases at all, raises
    ``ValueError`` naming what was given and what is accepted.
    """
    if isinstance(reference, dict):
        found: list[Any] = []
        for field in _TRIVIAQA_LIST_FIELDS:
            if field in reference:
                found.extend(_as_list(reference[field], where=f"reference[{field!r}]"))
        found.extend(reference[f] for f in _TRIVIAQA_TEXT_FIELDS if f in reference)
        if not found:
            raise ValueError(
                f"QA reference is a dict with keys {sorted(reference)} but none of 'aliases', "
                "'normalized_aliases', 'value', 'normalized_value'; set data.answer_key to the "
                f"field holding the answer; accepted: {_ACCEPTED}"
            )
        aliases = [_as_text(x, where="an alias in the reference record") for x in found]
    elif isinstance(reference, (list, tuple)):
        aliases = [_as_text(x, where="an item of the reference list") for x in reference]
    else:
        aliases = [_as_text(reference, where="the reference")]
    if not aliases:
        raise ValueError(f"QA reference {reference!r} has no answers; accepted: {_ACCEPTED}")
    return list(dict.fromkeys(aliases))


def exact_match(completion: str, *, reference: object, **_: object) -> float:
    """1.0 if the normalised ``<answer>`` equals any normalised alias, else 0.0."""
    predicted = _predicted(completion)
    if predicted is None:
        return 0.0
    return float(predicted in _normalized_aliases(reference))


def token_f1(completion: str, *, reference: object, **_: object) -> float:
    """The best SQuAD token F1 between the normalised ``<answer>`` and any alias.

    Tokens are the whitespace-separated words after ``normalize_answer``, counted as a
    bag (a word repeated in both counts as many times as it appears in both):
    ``common = |pred ∩ gold|``, ``precision = common / |pred|``, ``recall = common / |gold|``,
    ``F1 = 2PR / (P + R)``; 0.0 when nothing is shared or there is no answer.
    """
    predicted = _predicted(completion)
    if predicted is None:
        return 0.0
    pred_tokens = Counter(predicted.split())
    golds = _normalized_aliases(reference)
    return max((_f1(pred_tokens, Counter(gold.split())) for gold in golds), default=0.0)


def _f1(pred: Counter[str], gold: Counter[str]) -> float:
    common = sum((pred & gold).values())
    if common == 0:
        return 0.0
    precision = common / sum(pred.values())
    recall = common / sum(gold.values())
    return 2 * precision * recall / (precision + recall)


def _predicted(completion: str) -> str | None:
    answer = extract_answer(completion)
    if answer is None:
        return None
    return normalize_answer(answer) or None


def _normalized_aliases(reference: object) -> list[str]:
    """Normalised aliases, empty ones dropped; may be empty (then nothing matches)."""
    normalized = (normalize_answer(alias) for alias in answer_aliases(reference))
    return [alias for alias in dict.fromkeys(normalized) if alias]


def _as_list(value: object, *, where: str) -> Iterable[Any]:
    if isinstance(value, (list, tuple)):
        return value
    raise ValueError(f"QA {where} is a {type(value).__name__}, expected a list of strings")


def _as_text(value: object, *, where: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise ValueError(
        f"QA {where} is a {type(value).__name__} ({value!r:.80}); accepted: {_ACCEPTED}"
    )
