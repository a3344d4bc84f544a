"""A run's reward curve (PNG) and a self-contained HTML report, from ``metrics.jsonl`` alone.

Works on a finished run, a running one, or one with a single step; validation
metrics (``eval/*``) are optional. matplotlib is imported here, not at package import.
"""

from __future__ import annotations

import base64
import html
import io
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grouprl.metrics.jsonl import METRICS_FILE, read_jsonl

CURVE_FILE = "reward_curve.png"
REPORT_FILE = "report.html"

Series = tuple[list[int], list[float]]


def write_report(run_dir: Path, *, run_name: str | None = None) -> list[Path]:
    """Write ``reward_curve.png`` and ``report.html`` into ``run_dir``; returns their paths.

    ``run_name`` titles both; it defaults to the run directory's name.
    """
    run_dir = Path(run_dir)
    metrics_path = run_dir / METRICS_FILE
    if not metrics_path.exists():
        raise FileNotFoundError(
            f"no {METRICS_FILE} in {run_dir}: is this a grouprl run directory "
            "(the trainer writes it from the first step)?"
        )
    records = read_jsonl(metrics_path)
    series = metric_series(records)
    name = run_name or run_dir.resolve().name

    png = render_curve(series, title=name)
    curve_path = _write_atomic(run_dir / CURVE_FILE, png)
    page = render_html(
        series, records=records, title=name, png=png, hardware=render_hardware(series)
    )
    report_path = _write_atomic(run_dir / REPORT_FILE, page.encode("utf-8"))
    return [curve_path, report_path]


def metric_series(records: Sequence[dict[str, Any]]) -> dict[str, Series]:
    """Per metric name, (steps, values) sorted by step; a later line for a step wins."""
    by_name: dict[str, dict[int, float]] = {}
    for record in records:
        step = record.get("step")
        if not isinstance(step, int):
            continue
        for name, value in record.items():
            if name in ("step", "wall_time") or not isinstance(value, int | float):
                continue
            by_name.setdefault(name, {})[step] = float(value)
    return {
        name: (sorted(points), [points[s] for s in sorted(points)])
        for name, points in by_name.items()
    }


def smooth(values: Sequence[float], *, weight: float) -> list[float]:
    """Debiased exponential moving average (as TensorBoard's smoothing slider)."""
    out, ema, norm = [], 0.0, 0.0
    for v in values:
        ema = weight * ema + (1 - weight) * v
        norm = weight * norm + (1 - weight)
        out.append(ema / norm)
    return out


def render_curve(series: dict[str, Series], *, title: str) -> bytes:
    """PNG bytes: train reward mean (raw and smoothed), train accuracy, eval accuracy."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 4.5), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    if "reward/mean" in series:
        steps, values = series["reward/mean"]
        raw = {"color": "C0", "alpha": 0.35, "lw": 1, **_markers(steps)}
        ax.plot(steps, values, label="train reward mean", **raw)
        if len(steps) >= 5:
            weight = 0.6 if len(steps) < 30 else 0.8 if len(steps) < 300 else 0.9
            smoothed = smooth(values, weight=weight)
            ax.plot(steps, smoothed, color="C0", lw=2, label=f"train reward mean (EMA {weight})")
    if "accuracy" in series:
        steps, values = series["accuracy"]
        ax.plot(steps, values, color="C2", lw=1.2, label="train accuracy", **_markers(steps))
    if "eval/accuracy" in series:
        steps, values = series["eval/accuracy"]
        ax.plot(steps, values, color="C3", ls="--", lw=1, marker="D", ms=6, label="eval accuracy")
    if ax.lines:
        ax.legend(loc="best", fontsize="small")
    else:
        centre = {"transform": ax.transAxes, "ha": "center", "va": "center"}
        ax.text(0.5, 0.5, "no reward or accuracy logged yet", **centre)
    ax.set_xlabel("step")
    ax.set_ylabel("reward / accuracy")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


PHASES = (
    ("time/generate_s", "generate"),
    ("time/reward_s", "reward"),
    ("time/train_s", "train"),
    ("time/weight_sync_s", "weight sync"),
)
MEMORY = (
    ("memory/peak_reserved_gib", "GPU reserved, peak"),
    ("memory/peak_allocated_gib", "GPU allocated, peak"),
    ("memory/host_rss_gib", "host resident"),
)
SPEED = (
    ("perf/generate_tokens_per_s", "generated per replica"),
    ("perf/train_tokens_per_s", "trained per rank"),
)


def render_hardware(series: dict[str, Series]) -> bytes | None:
    """PNG bytes of what the steps cost (``metrics/telemetry.py``): seconds per phase
    (stacked), memory, tokens per second per device, MFU; None for a run that logged
    none of them."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    memory, speed, phases = (
        [(name, label) for name, label in lines if name in series]
        for lines in (MEMORY, SPEED, PHASES)
    )
    if not (memory or speed or phases or "perf/mfu" in series):
        return None
    fig = Figure(figsize=(10, 6.5), dpi=100, layout="constrained")
    time_ax, memory_ax, speed_ax, mfu_ax = fig.subplots(2, 2).flat
    if phases:
        steps = sorted(set().union(*(series[name][0] for name, _ in phases)))
        stacks = [_on(steps, series[name]) for name, _ in phases]
        time_ax.stackplot(steps, stacks, labels=[label for _, label in phases], alpha=0.8)
        time_ax.legend(loc="upper left", fontsize="small")
    time_ax.set(title="seconds per step, by phase", xlabel="step", ylabel="s")
    for ax, lines in ((memory_ax, memory), (speed_ax, speed)):
        for name, label in lines:
            ax.plot(*series[name], label=label, **_markers(series[name][0]))
        if lines:
            ax.legend(loc="best", fontsize="small")
    memory_ax.set(title="memory (the busiest rank)", xlabel="step", ylabel="GiB")
    speed_ax.set(title="tokens per second, per device", xlabel="step", ylabel="tokens/s")
    if "perf/mfu" in series:
        steps, values = series["perf/mfu"]
        mfu_ax.plot(steps, [100 * v for v in values], color="C3", **_markers(steps))
    mfu_ax.set(title="model FLOPs utilization of the update", xlabel="step", ylabel="%")
    for ax in (time_ax, memory_ax, speed_ax, mfu_ax):
        ax.grid(alpha=0.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _on(steps: Sequence[int], series: Series) -> list[float]:
    """``series`` at ``steps``, 0 where it has no point."""
    values = dict(zip(*series, strict=True))
    return [values.get(step, 0.0) for step in steps]


def _markers(steps: Sequence[int]) -> dict[str, Any]:
    """Dots on short curves, so a run of one or a few steps is visible at all."""
    return {"marker": "o", "ms": 3} if len(steps) <= 40 else {}


def render_html(
    series: dict[str, Series],
    *,
    records: Sequence[dict[str, Any]],
    title: str,
    png: bytes,
    hardware: bytes | None = None,
) -> str:
    """A standalone page: the curve inline (base64), a table of headline numbers, and
    the hardware figure when there is one."""
    rows = _summary_rows(series, records)
    table = "\n".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows
    )
    image = base64.b64encode(png).decode("ascii")
    name = html.escape(title)
    cost = ""
    if hardware is not None:
        data = base64.b64encode(hardware).decode("ascii")
        cost = (
            '<h2>What the steps cost</h2>\n<img alt="time, memory, throughput and MFU by '
            f'step" src="data:image/png;base64,{data}">\n'
        )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{name} - grouprl report</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 860px; color: #222; }}
table {{ border-collapse: collapse; margin-top: 1em; }}
th, td {{ border: 1px solid #ccc; padding: 4px 10px; text-align: left; }}
th {{ background: #f4f4f4; font-weight: 600; }}
img {{ max-width: 100%; }}
</style></head>
<body>
<h1>{name}</h1>
<img alt="reward and accuracy by step" src="data:image/png;base64,{image}">
<table>
{table}
</table>
{cost}</body></html>
"""


def _summary_rows(
    series: dict[str, Series], records: Sequence[dict[str, Any]]
) -> list[tuple[str, str]]:
    steps = sorted({r["step"] for r in records if isinstance(r.get("step"), int)})
    rows = [("steps logged", f"{len(steps)}" + (f" ({steps[0]} to {steps[-1]})" if steps else ""))]
    times = [r["wall_time"] for r in records if isinstance(r.get("wall_time"), int | float)]
    if len(times) >= 2:
        rows.append(("wall time", _duration(max(times) - min(times))))
    if "eval/accuracy" in series:
        ev_steps, ev_values = series["eval/accuracy"]
        best = max(range(len(ev_values)), key=lambda i: ev_values[i])
        rows += [
            ("eval accuracy, first", _at(ev_values[0], ev_steps[0])),
            ("eval accuracy, last", _at(ev_values[-1], ev_steps[-1])),
            ("eval accuracy, best", _at(ev_values[best], ev_steps[best])),
        ]
    else:
        rows.append(("eval accuracy", "no validation logged"))
    for name, label in (("reward/mean", "train reward mean"), ("accuracy", "train accuracy")):
        if name in series:
            s, v = series[name]
            rows += [(f"{label}, first", _at(v[0], s[0])), (f"{label}, last", _at(v[-1], s[-1]))]
    return rows


def _at(value: float, step: int) -> str:
    return f"{value:.4f} (step {step})" if math.isfinite(value) else f"{value} (step {step})"


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m {secs:02d}s" if hours else f"{minutes}m {secs:02d}s"


def _write_atomic(path: Path, data: bytes) -> Path:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return path
