"""A live progress bar for training, or plain lines where there is no terminal.

On a terminal (and with ``metrics.progress: true``) a rich bar shows
step/total, elapsed, remaining and the live metrics; ``log`` prints above it.
Otherwise (CI, ``| tee``, ``metrics.progress: false``) each step becomes one
``ConsoleSink`` line, at most every ``min_interval_s`` seconds.

    with TrainProgress(total_steps=60, start_step=resumed_step) as progress:
        for step in ...:
            progress.update(step, metrics)
            progress.log("saved checkpoint step_000020")
"""

from __future__ import annotations

from collections.abc import Mapping

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from grouprl.metrics.console import (
    ConsoleSink,
    StepTracker,
    format_duration,
    format_eval_line,
)


class TrainProgress:
    """``update(step, metrics)`` takes the same mappings as the metrics sinks
    (validation-only mappings update the shown eval accuracy and print a line)."""

    def __init__(
        self,
        *,
        total_steps: int,
        start_step: int = 0,
        show_bar: bool = True,
        console: Console | None = None,
        min_interval_s: float = 5.0,
    ) -> None:
        self.console = console or Console()
        self.total_steps = total_steps
        self.start_step = start_step
        self.live = show_bar and self.console.is_terminal and not self.console.is_dumb_terminal
        """True when a live bar is drawn; False means plain lines."""
        self._lines = ConsoleSink(
            self.console, total_steps=total_steps, min_interval_s=min_interval_s
        )
        self._tracker: StepTracker = self._lines.tracker
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def start(self) -> None:
        if not self.live or self._progress is not None:
            return
        self._progress = Progress(
            TextColumn("[bold]train"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[eta]}"),
            TextColumn("{task.fields[stats]}"),
            console=self.console,
        )
        self._task = self._progress.add_task(
            "train", total=self.total_steps, completed=self.start_step, eta="", stats=""
        )
        self._progress.start()

    def update(self, step: int, metrics: Mapping[str, float]) -> None:
        if not self.live:
            self._lines.log(step, metrics)
            return
        self.start()
        assert self._progress is not None and self._task is not None
        self._tracker.observe(step, metrics)
        eval_line = format_eval_line(step, metrics, total_steps=self.total_steps)
        if eval_line:
            self.log(eval_line)
        eta = self._tracker.eta_s
        self._progress.update(
            self._task,
            completed=max(step, self._progress.tasks[0].completed),
            eta="" if eta is None else f"eta {format_duration(eta)}",
            stats=self._tracker.stats(),
        )

    def log(self, message: str) -> None:
        """Print one line (above the bar when it is live); markup is not interpreted."""
        self.console.print(Text(message), soft_wrap=True)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def __enter__(self) -> TrainProgress:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
