"""TensorBoard scalars under ``<run_dir>/tensorboard`` (torch's SummaryWriter, imported late)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any


class TensorBoardSink:
    """One scalar per metric name, at the given step.

    ``purge_step`` is for resume: TensorBoard hides events at that step and later
    that an earlier, crashed process wrote, so curves do not double back. With
    ``purge_step`` 0 (a resume that found no checkpoint) everything earlier is hidden, the
    config too, so it is written again.
    """

    def __init__(
        self,
        log_dir: Path,
        *,
        purge_step: int | None = None,
        config_dict: Mapping[str, Any] | None = None,
    ) -> None:
        from torch.utils.tensorboard import SummaryWriter

        Path(log_dir).mkdir(parents=True, exist_ok=True)
        self.log_dir = Path(log_dir)
        self._writer = SummaryWriter(log_dir=str(log_dir), purge_step=purge_step, flush_secs=10)
        if config_dict is not None and not purge_step:  # a new run, or one from scratch
            text = json.dumps(config_dict, indent=2, sort_keys=True, default=str)
            # Four-space indent renders as a code block in TensorBoard's markdown view.
            self._writer.add_text("config", "    " + text.replace("\n", "\n    "), 0)

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        for name, value in metrics.items():
            self._writer.add_scalar(name, value, global_step=step)

    def close(self) -> None:
        self._writer.close()
