"""The ``reasoning_gym`` reward: a reasoning-gym task's own scorer, on the entry rebuilt
from the row (``data/reasoning_gym.py``), so the score is the task's, partial credit
included.

The answer handed to ``score_answer``, from the completion:

1. the last ``<answer>...</answer>`` (reasoning-gym's format; its default system prompt,
   ``reasoning_gym.utils.SYSTEM_PROMPTS["default"]``, asks for it), stripped;
2. else the rest of the line after the last ``####`` (GSM8K's and the tiny model's);
3. else none: ``score_answer(None, entry)``, which every task scores as wrong.

The whole completion is never the answer: several scorers give partial credit to an answer
that contains the right one, which a completion listing many numbers would collect.

Importing reasoning-gym (every task module with it) takes 2-6 s: each reward worker does it
once as it starts (``warm_up``, ``declares.WarmsUp``), not within a call's deadline.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from dataclasses import dataclass
from typing import Any

from grouprl.data.reasoning_gym import entry

_TAGGED = re.compile(r"<answer>\s?(.*?)\s?</answer>", re.DOTALL)
_HASHES = re.compile(r"####[ \t]*([^\n]*)")


@dataclass(frozen=True)
class ReasoningGymScore:
    """The ``reasoning_gym`` reward: callable as a grouprl reward function."""

    def __call__(self, completion: str, *, row: dict[str, Any], **_: Any) -> float:
        """The row's task's ``score_answer`` of the completion's answer (module docstring)."""
        dataset, item = entry(row)
        return float(dataset.score_answer(extract_answer(completion), item))

    def warm_up(self) -> None:
        """Import reasoning-gym and its tasks' modules (its package imports them all) once
        per worker, outside a call's deadline; not installed: the calls say how to install."""
        if importlib.util.find_spec("reasoning_gym") is not None:
            importlib.import_module("reasoning_gym")


reasoning_gym_score = ReasoningGymScore()
"""The registered ``reasoning_gym`` reward."""


def extract_answer(completion: str) -> str | None:
    """The answer in ``completion`` by the module docstring's rules, or None."""
    tagged = _TAGGED.findall(completion)
    if tagged:
        return tagged[-1].strip()
    hashes = _HASHES.findall(completion)
    if hashes:
        return hashes[-1].strip()
    return None
