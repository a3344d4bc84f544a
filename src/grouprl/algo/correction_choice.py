"""What ``algo.correction: auto`` means: the one rule, torch-free, so that the config
(``RunConfig`` resolves ``auto`` at load time, with ``rollout.max_staleness``) and the
losses (``algo/corrections.correction_name``: an ``AlgoConfig`` used alone, which has no
staleness) choose alike."""

from __future__ import annotations

from typing import Literal


def auto_correction(*, tis_cap: float | None, stale: bool) -> Literal["tis", "decoupled", "none"]:
    """``tis`` when ``algo.tis_cap`` is set (it chose TIS before ``algo.correction``
    existed), ``decoupled`` (decoupled PPO, AReaL's) when samples can be drawn by older
    weights (``stale``: rollout.max_staleness >= 1), else ``none``."""
    if tis_cap is not None:
        return "tis"
    return "decoupled" if stale else "none"
