"""Plain console lines for training: the non-TTY (CI, log file) view of a run.

One concise line per step, at most every ``min_interval_s`` seconds (the first
and last steps always print), plus one line per validation:

    step 12/60 reward 0.410 acc 0.375 kl 0.0012 mfu 31% gpu 27.6G 3.1s/step eval acc 0.450 eta 2:28
    eval step 20/60 acc 0.450 reward 0.431
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Mapping

from rich.console import Console
from rich.text import Text

# (metric name, label, decimals) shown on a step line, in order.
STEP_FIELDS = (("reward/mean", "reward", 3), ("accuracy", "acc", 3), ("kl", "kl", 4))
EVAL_FIELDS = (("eval/accuracy", "acc", 3), ("eval/reward_mean", "reward", 3))


class StepTracker:
    """Seconds per step, time remaining and the last validation accuracy.

    Seconds per step come from the ``time/step_s`` metric when logged, else from
    the wall time between calls. The estimate is the mean of the last ``window`` steps.
    """

    def __init__(
        self,
        *,
        total_steps: int | None,
        window: int = 20,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total_steps = total_steps
        self.step: int | None = None
        self.step_s: float | None = None
        self.eval_accuracy: float | None = None
        self.train_metrics: Mapping[str, float] = {}
        self._clock = clock
        self._recent: deque[float] = deque(maxlen=window)
        self._last_call: tuple[int, float] | None = None

    def observe(self, step: int, metrics: Mapping[str, float]) -> None:
        now = self._clock()
        if "eval/accuracy" in metrics:
            self.eval_accuracy = metrics["eval/accuracy"]
        if not has_train_metrics(metrics):
            return
        step_s = metrics.get("time/step_s")
        if step_s is None and self._last_call is not None and step > self._last_call[0]:
            step_s = (now - self._last_call[1]) / (step - self._last_call[0])
        self._last_call = (step, now)
        if step_s is not None and math.isfinite(step_s):
            self.step_s = step_s
            self._recent.append(step_s)
        self.step = step
        self.train_metrics = metrics

    @property
    def eta_s(self) -> float | None:
        if not self._recent or self.total_steps is None or self.step is None:
            return None
        return max(0, self.total_steps - self.step) * sum(self._recent) / len(self._recent)

    def stats(self) -> str:
        """Live metrics without the step counter: ``reward 0.410 acc 0.375 ... eval acc 0.450``."""
        parts = [
            f"{label} {format_number(self.train_metrics[name], decimals)}"
            for name, label, decimals in STEP_FIELDS
            if name in self.train_metrics
        ]
        parts += hardware_fields(self.train_metrics)
        if self.step_s is not None:
            parts.append(f"{self.step_s:.1f}s/step")
        if self.eval_accuracy is not None:
            parts.append(f"eval acc {format_number(self.eval_accuracy, 3)}")
        return " ".join(parts)


class ConsoleSink:
    """A ``MetricsSink`` printing plain lines (no live display) to a rich Console."""

    def __init__(
        self,
        console: Console | None = None,
        *,
        total_steps: int | None = None,
        min_interval_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.console = console or Console()
        self.tracker = StepTracker(total_steps=total_steps, clock=clock)
        self._min_interval_s = min_interval_s
        self._clock = clock
        self._last_print: float | None = None

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        self.tracker.observe(step, metrics)
        eval_line = format_eval_line(step, metrics, total_steps=self.tracker.total_steps)
        if eval_line:
            self.print(eval_line)
        if not has_train_metrics(metrics):
            return
        now = self._clock()
        due = (
            self._last_print is None
            or now - self._last_print >= self._min_interval_s
            or step == self.tracker.total_steps
        )
        if due:
            self._last_print = now
            self.print(format_step_line(self.tracker))

    def print(self, message: str) -> None:
        """One unstyled, unwrapped line (markup in ``message`` is not interpreted)."""
        self.console.print(Text(message), soft_wrap=True)

    def close(self) -> None:
        """Nothing to release."""


def has_train_metrics(metrics: Mapping[str, float]) -> bool:
    return any(not name.startswith("eval/") for name in metrics)


def hardware_fields(metrics: Mapping[str, float]) -> list[str]:
    """``mfu 31%`` and the step's memory peak: ``gpu 27.6G`` (reserved, the busiest rank)
    or, on CPU, ``rss 0.7G`` (resident now)."""
    parts = []
    if "perf/mfu" in metrics and math.isfinite(metrics["perf/mfu"]):
        parts.append(f"mfu {100 * metrics['perf/mfu']:.0f}%")
    if "memory/peak_reserved_gib" in metrics:
        parts.append(f"gpu {metrics['memory/peak_reserved_gib']:.1f}G")
    elif "memory/host_rss_gib" in metrics:
        parts.append(f"rss {metrics['memory/host_rss_gib']:.1f}G")
    return parts


def format_step_line(tracker: StepTracker) -> str:
    total = "" if tracker.total_steps is None else f"/{tracker.total_steps}"
    line = f"step {tracker.step}{total} {tracker.stats()}".rstrip()
    eta = tracker.eta_s
    return line if eta is None else f"{line} eta {format_duration(eta)}"


_COUNTS = ("eval/episode/", "eval/gateway/")
"""Episode counts and shares left off the eval line when zero (stop reasons that did not
happen, no tool calls): metrics.jsonl has them all."""


def format_eval_line(
    step: int, metrics: Mapping[str, float], *, total_steps: int | None = None
) -> str | None:
    """``eval step 20/60 acc 0.450 reward 0.431``, or None when no ``eval/`` metric is present."""
    names = [name for name in metrics if name.startswith("eval/")]
    if not names:
        return None
    known = {name for name, _, _ in EVAL_FIELDS}
    parts = [
        f"{label} {format_number(metrics[name], decimals)}"
        for name, label, decimals in EVAL_FIELDS
        if name in metrics
    ]
    parts += [
        f"{name.removeprefix('eval/')} {format_number(metrics[name], 3)}"
        for name in names
        if name not in known and not (metrics[name] == 0 and name.startswith(_COUNTS))
    ]
    total = "" if total_steps is None else f"/{total_steps}"
    return f"eval step {step}{total} " + " ".join(parts)


def format_number(value: float, decimals: int) -> str:
    """Fixed decimals, switching to scientific for tiny non-zero values (KL is often ~1e-5)."""
    if not math.isfinite(value):
        return str(value)
    if value != 0 and abs(value) < 10 ** (-decimals):
        return f"{value:.1e}"
    return f"{value:.{decimals}f}"


def format_duration(seconds: float) -> str:
    """``2:28`` or ``1:02:28``."""
    total = round(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
