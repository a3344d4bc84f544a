"""What the reward functions need of the data's rows, checked before anything loads (for
``grouprl plan`` and the start of a run), from the columns ``data/peek.py`` reads.

verl's reward manager reads ``data_source`` from every row (``data_item.non_tensor_batch
["data_source"]``: a KeyError without it) and passes it to ``compute_score``, which picks
its scorer by it; a verl-style function given rows without the column would otherwise
fail on every sample after the model loaded (``calls.score_verl``). A source whose
columns cannot be read here (a hub dataset) is checked at its first call instead.
"""

from __future__ import annotations

from typing import Any

from grouprl.config.model_data import DataConfig
from grouprl.data.peek import source_columns
from grouprl.rewards.args import with_args
from grouprl.rewards.calls import VERL_SOURCE_KEY
from grouprl.rewards.registry import REWARDS, RewardError, call_style


def verl_row_problems(
    functions: list[Any], data: DataConfig, *, missing_ok: bool = False
) -> list[str]:
    """A message per data source (``data.train``, ``data.eval``) without the
    ``data_source`` column that a verl-style entry of ``functions`` (``RewardFunction``
    records) is called with; [] when none is verl-style, or the columns are unknown here.
    An entry that does not resolve is ``registry.reward_problems``' to report."""
    verl = [i for i, entry in enumerate(functions) if _style(entry, i) == "verl"]
    if not verl:
        return []
    problems = []
    for key, source in (("data.train", data.train), ("data.eval", data.eval)):
        if source is None:
            continue
        columns = source_columns(source, missing_ok=missing_ok)
        if columns is None or VERL_SOURCE_KEY in columns:
            continue
        entry = functions[verl[0]]
        problems.append(
            f"reward.functions.{verl[0]}.name={entry.name!r} is a verl compute_score, "
            f"called with data_source= from each row, but {key}.source={source.label!r} "
            f"has no {VERL_SOURCE_KEY!r} column (its columns: {', '.join(sorted(columns))}); "
            "verl's reward manager requires it in every row. Fix: add a "
            f"{VERL_SOURCE_KEY!r} column (the dataset's name, as verl's preprocessing "
            "writes it), or make the function a grouprl-style one (docs/rewards.md)"
        )
    return problems


def _style(entry: Any, index: int) -> str | None:
    """The call style of ``entry`` (None: it does not resolve or fit a style here)."""
    if entry.style != "auto":
        return entry.style
    fn, found = REWARDS.check(entry.name, key=f"reward.functions.{index}.name", missing_ok=True)
    if fn is None or found:
        return None
    try:
        return call_style(with_args(fn, entry.args), entry, index=index)
    except (RewardError, TypeError, ValueError):
        return None
