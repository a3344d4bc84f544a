"""A step's scores (``RewardScores``, what ``scoring.RewardScorer`` returns) and the
metrics made of them: each function's mean over the samples it scored, its failures and
the samples it did not apply to, and its extras.

::

    parts[fn][i]: a score   the function scored sample i ─► in reward/<fn> (the mean)
                  None      it did not apply (a TRL None) ─► reward/<fn>/not_applicable
    extras[fn][i]: None, part not None: its call failed   ─► reward/<fn>/failures

A failed call's part is 0.0 (``RewardScores.parts``), which is not a score: averaging it in
would make a failing grader look like worse completions. ``reward/<fn>`` is left out of a
step in which the function scored nothing, rather than logged as 0 (TRL logs ``nanmean``,
NaN there). ``reward/<fn>/failures`` is logged every step, 0 where none (not for the
agent's part, ``env.agent``'s reward, which is no call here).

A learned reward (``declares.Learned``: ``reward_model``) adds ``reward/<fn>/agreement``
(``agreement``): of the pairs of samples in a prompt group that ``reward.correct_function``
scores differently, the share it orders the same way. Reward hacking shows as the reward
rising while this falls.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from grouprl.config.imports import is_import_path
from grouprl.rewards.extras import Extra, Tally
from grouprl.rewards.failures import RewardFailure

OWN_METRICS = ("mean", "std", "overlong", "errors", "timeouts", "crashes", "memory_errors")
"""``reward/...`` metrics that are not a function's: a function is never logged as one."""


@dataclass
class RewardScores:
    total: list[float]
    """Weighted sum of the scores of the functions that applied, one per completion (TRL's
    ``nansum``); 0.0 for a sample none applied to, which is a failure (``errors``)."""
    parts: dict[str, list[float | None]]
    """Each function's unweighted score per completion: 0.0 where its call failed, None
    where it did not apply (a TRL function returned None: TRL's "not applicable")."""
    errors: list[RewardFailure] = field(default_factory=list)
    """The failed calls; the samples they cover are failed samples (``reward.on_error``)."""
    worker_restarts: int = 0
    """Reward workers replaced while scoring (killed at a deadline, crashed, out of memory)."""
    extras: dict[str, list[dict[str, Extra] | None]] = field(default_factory=dict)
    """Each function's extras per completion (``extras.py``): ``{}`` where it returned
    none, None where its call failed or it did not apply."""
    tallies: dict[str, Tally] = field(default_factory=dict)
    """Each function's extras tallied for the step's metrics (``metrics``)."""
    agreement: dict[str, tuple[float, int]] = field(default_factory=dict)
    """Each learned function's ``agreement`` with ``reward.correct_function``: the pairs
    it orders as the checker does (ties half) and the pairs the checker tells apart."""

    @staticmethod
    def concat(batches: list[RewardScores]) -> RewardScores:
        """The scores of several scoring calls, in order (errors keep their own indices)."""
        parts: dict[str, list[float | None]] = {}
        extras: dict[str, list[dict[str, Extra] | None]] = {}
        tallies: dict[str, Tally] = {}
        agreement: dict[str, tuple[float, int]] = {}
        for scores in batches:
            for name, values in scores.parts.items():
                parts.setdefault(name, []).extend(values)
            for name, found in scores.extras.items():
                extras.setdefault(name, []).extend(found)
            for name, counted in scores.tallies.items():
                tallies.setdefault(name, Tally()).merge(counted)
            for name, (same, pairs) in scores.agreement.items():
                had = agreement.get(name, (0.0, 0))
                agreement[name] = (had[0] + same, had[1] + pairs)
        return RewardScores(
            total=[x for scores in batches for x in scores.total],
            parts=parts,
            errors=[e for scores in batches for e in scores.errors],
            worker_restarts=sum(scores.worker_restarts for scores in batches),
            extras=extras,
            tallies=tallies,
            agreement=agreement,
        )


def metrics(scores: RewardScores) -> dict[str, float]:
    """``reward/errors`` (every failed call), of which ``reward/timeouts``,
    ``reward/crashes`` and ``reward/memory_errors``; ``reward/worker_restarts``; each
    function's mean over the samples it scored under its short name (``metric_names``),
    with ``/failures`` (samples its failed calls covered), ``/not_applicable`` (samples it
    returned None for, where any) and its extras under it (``extra_metrics``)."""
    kinds = [e.kind for e in scores.errors]
    out = {
        "reward/errors": float(len(kinds)),
        "reward/timeouts": float(kinds.count("timeout")),
        "reward/crashes": float(kinds.count("crash")),
        "reward/memory_errors": float(kinds.count("memory")),
        "reward/worker_restarts": float(scores.worker_restarts),
    }
    names = metric_names(list(scores.parts))
    for name, values in scores.parts.items():
        found = scores.extras.get(name)  # none for a part with no calls (the agent's)
        failed = [
            v is not None and found is not None and found[i] is None for i, v in enumerate(values)
        ]
        scored = [v for v, bad in zip(values, failed, strict=True) if v is not None and not bad]
        if scored:
            out[names[name]] = sum(scored) / len(scored)
        if found is not None:
            out[f"{names[name]}/failures"] = float(sum(failed))
        if (skipped := sum(v is None for v in values)) > 0:
            out[f"{names[name]}/not_applicable"] = float(skipped)
        same, pairs = scores.agreement.get(name, (0.0, 0))
        if pairs:  # absent where the checker told no pair apart
            out[f"{names[name]}/agreement"] = same / pairs
    return out | extra_metrics(scores)


def agreement(
    learned: list[float | None], checker: list[float | None], groups: list[tuple[int, int]]
) -> tuple[float, int]:
    """How often the ``learned`` scores order two samples of a prompt group as the
    ``checker``'s do: over every pair in a group (``groups``: ``(start, stop)``) that the
    checker scores differently, 1 where the learned scores differ the same way, 1/2 where
    they tie, 0 where they are the other way round. Returns (that sum, the pairs); samples
    either left unscored (None: failed or not applicable) are in no pair."""
    same, pairs = 0.0, 0
    for start, stop in groups:
        for a in range(start, stop):
            for b in range(a + 1, stop):
                la, lb, ca, cb = learned[a], learned[b], checker[a], checker[b]
                if la is None or lb is None or ca is None or cb is None or ca == cb:
                    continue
                pairs += 1
                same += 0.5 if la == lb else float((la > lb) == (ca > cb))
    return same, pairs


def extra_metrics(scores: RewardScores) -> dict[str, float]:
    """Each function's extras under its metric name: ``reward/<fn>/<key>/<category>``, the
    share of its scored samples in the category, and ``reward/<fn>/<key>``, a number's
    mean (``extras.py``)."""
    names = metric_names(list(scores.parts))
    out: dict[str, float] = {}
    for name, counted in scores.tallies.items():
        out.update(counted.metrics(names[name]))
    return out


def metric_names(functions: list[str]) -> dict[str, str]:
    """Each function's metric, ``reward/<short name>``: a name given by path
    (``/abs/path/file.py:fn``, ``pkg.mod:fn``) is its attribute, ``fn``. A short name
    taken, by a function listed earlier or by a metric of the reward's own (``mean``,
    ``errors``, ...), gets the first free suffix, ``fn_2``, ``fn_3``, ..."""
    taken = {*OWN_METRICS, "worker_restarts"}
    out = {}
    for name in functions:
        short = name.rpartition(":")[2] if is_import_path(name) else name
        candidate, k = short, 1
        while candidate in taken:
            k += 1
            candidate = f"{short}_{k}"
        taken.add(candidate)
        out[name] = f"reward/{candidate}"
    return out
