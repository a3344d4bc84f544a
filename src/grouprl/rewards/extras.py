"""What a reward call returns beside its score (its *extras*), and the step's metrics made
of them: outcome categories (passed, timeout, ...) and averaged numbers.

A grouprl function (``scope: sample``, and each item of a ``scope: group`` list) or a verl
``compute_score`` may return, for a completion, a number or a dict with the number under
``score`` (verl's ``reward_extra_info`` channel)::

    {"score": 0.0, "outcome": "timeout", "tests_passed": 0.5}
                    │ a str: a category        │ a number or bool: averaged
                    ▼                          ▼
    reward/<fn>/outcome/timeout (share of    reward/<fn>/tests_passed (mean over the
    the function's scored samples)           samples that returned it)

``<fn>`` is the function's metric name (``scoring.metric_names``). A failed call has no
extras; other values (None, lists, NaN) are kept out. A category is logged in a step when
some sample had it; the categories a reward object declares (``declares.DeclaresCategories``:
``code_tests``' outcomes) are logged every step, 0 where none, so plots have every line.
A key has at most ``CATEGORY_LIMIT`` categories in a run (declared ones included): a
value past them, or longer than ``CATEGORY_CHARS``, counts as ``other`` (one warning
per key and run), so free text cannot flood the metrics. TRL's batched functions return
numbers only (TRL has no such channel).
"""

from __future__ import annotations

import logging
import math
import numbers
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

logger = logging.getLogger(__name__)

Extra = str | float | bool
"""An extra's value: a str is a category; a float (any finite number) or bool is averaged."""

CATEGORY_LIMIT = 16
"""Distinct categories of one key of one function in a run; later new ones are ``other``."""
CATEGORY_CHARS = 64
"""A longer category is ``other`` (free text is no category)."""
OTHER = "other"


class Scored(NamedTuple):
    """One completion's score and its extras (``{}``: none), as a worker returns them."""

    score: float
    extras: dict[str, Extra]


def extras_of(value: Mapping[Any, Any]) -> dict[str, Extra]:
    """The extras in a returned dict: its keys other than ``score`` whose values are a str,
    a bool or a finite number (numpy scalars too), the rest left out."""
    out: dict[str, Extra] = {}
    for key, raw in value.items():
        if key == "score" or not isinstance(key, str):
            continue
        extra = _extra_value(raw)
        if extra is not None:
            out[key] = extra
    return out


def _extra_value(value: Any) -> Extra | None:
    if isinstance(value, str | bool):
        return value
    if not isinstance(value, numbers.Real) and hasattr(value, "item"):
        try:
            value = value.item()  # a numpy or 0-d tensor scalar
        except (TypeError, ValueError):  # not a scalar: no extra
            return None
        if isinstance(value, bool):
            return value
    if isinstance(value, numbers.Real) and math.isfinite(float(value)):
        return float(value)
    return None


@dataclass
class Tally:
    """One function's extras over some samples, for metrics: how many it scored, each
    key's categories counted, each numeric key's sum and count."""

    scored: int = 0
    categories: dict[str, Counter[str]] = field(default_factory=dict)
    sums: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def merge(self, other: Tally) -> None:
        """Adds ``other``'s samples (the stream's rounds of one step)."""
        self.scored += other.scored
        for key, counter in other.categories.items():
            self.categories.setdefault(key, Counter()).update(counter)  # zeros kept
        for key, total in other.sums.items():
            self.sums[key] = self.sums.get(key, 0.0) + total
            self.counts[key] = self.counts.get(key, 0) + other.counts[key]

    def metrics(self, prefix: str) -> dict[str, float]:
        """``{prefix}/{key}/{category}``: share of scored samples; ``{prefix}/{key}``: mean."""
        out = {}
        if self.scored:
            for key, counter in self.categories.items():
                for category, count in counter.items():
                    out[f"{prefix}/{key}/{category}"] = count / self.scored
        for key, total in self.sums.items():
            out[f"{prefix}/{key}"] = total / self.counts[key]
        return out


class CategoryBound:
    """The run's categories per (function, key): at most ``limit``, first come; a later new
    value is ``OTHER``, with one warning per key. Kept by the run's ``RewardScorer``."""

    def __init__(self, limit: int = CATEGORY_LIMIT) -> None:
        self.limit = limit
        self._seen: dict[tuple[str, str], set[str]] = {}

    def admit(self, function: str, key: str, value: str) -> str:
        """``value``, or ``OTHER`` when the key has its ``limit`` of categories already, or
        ``value`` is longer than ``CATEGORY_CHARS``."""
        seen = self._seen.setdefault((function, key), set())
        if value in seen:
            return value
        if len(seen) < self.limit and len(value) <= CATEGORY_CHARS:
            seen.add(value)
            return value
        if OTHER not in seen:
            seen.add(OTHER)  # once per key: the warning below
            logger.warning(
                "reward function %r returned a category %r for %r past the %d distinct "
                "categories (of at most %d characters) a key may have in a run: it and any "
                "later new one count as %r. A str extra is a category (a small fixed set, "
                "such as an outcome); return free text elsewhere, or a number",
                function,
                value[:CATEGORY_CHARS],
                key,
                self.limit,
                CATEGORY_CHARS,
                OTHER,
            )
        return OTHER


def tally(
    function: str,
    extras: Sequence[dict[str, Extra] | None],
    *,
    declared: Mapping[str, Sequence[str]],
    bound: CategoryBound,
) -> Tally:
    """The ``Tally`` of one function's ``extras``, one per sample (None: its call failed,
    not scored); ``declared`` categories are listed at 0 where no sample had them."""
    out = Tally()
    for key, categories in declared.items():
        counter = out.categories.setdefault(key, Counter())
        for category in categories:
            counter[bound.admit(function, key, category)] += 0
    for sample in extras:
        if sample is None:
            continue
        out.scored += 1
        for key, value in sample.items():
            if isinstance(value, str):
                category = bound.admit(function, key, value)
                out.categories.setdefault(key, Counter())[category] += 1
            else:
                out.sums[key] = out.sums.get(key, 0.0) + float(value)
                out.counts[key] = out.counts.get(key, 0) + 1
    return out
