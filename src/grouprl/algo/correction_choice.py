"""What ``algo.correction: auto`` means: the one rule, torch-free, so that the config
(``RunConfig`` resolves ``auto`` at load time, with ``rollout.max_staleness``) and the
losses (``algo/corrections.correction_name``: an ``AlgoConfig`` used alone, which has no
staleness) choose alike; and the corrections' names, the choices of ``algo.correction``
besides ``auto`` (a test holds them equal to ``algo/corrections.CORRECTIONS``)."""

from __future__ import annotations

from typing import Literal

CORRECTION_NAMES = ("none", "decoupled", "tis", "seq_tis", "token_mask", "seq_mask", "m2po")
"""The registered off-policy corrections, in ``algo/corrections.py``'s order."""


def auto_correction(*, tis_cap: float | None, stale: bool) -> Literal["tis", "decoupled", "none"]:
    """``tis`` when ``algo.tis_cap`` is set (it chose TIS before ``algo.correction``
    existed), ``decoupled`` (decoupled PPO, AReaL's) when samples can be drawn by older
    weights (``stale``: rollout.max_staleness >= 1), else ``none``."""
    if tis_cap is not None:
        return "tis"
    return "decoupled" if stale else "none"
