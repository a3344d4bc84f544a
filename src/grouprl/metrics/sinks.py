"""The metrics sink seam and the factory that builds a run's sinks from config.

```
 trainer ── log(step, {name: float}) ──► MetricsFanout ──► JsonlSink        run_dir/metrics.jsonl
                                                      ├──► TensorBoardSink  run_dir/tensorboard/
                                                      ├──► WandbSink        (metrics.wandb.project)
                                                      └──► MlflowSink       (metrics.mlflow.enabled)
```
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from grouprl.config.observe import MetricsConfig
from grouprl.metrics.jsonl import METRICS_FILE, RESERVED_KEYS, JsonlSink

TENSORBOARD_DIR = "tensorboard"
NO_CHECKPOINT = -1
"""``make_sinks``' ``resume_step`` when a resuming run found no checkpoint: it starts from
scratch, so every line an earlier session (killed before its first save) wrote goes."""


class MetricsSink(Protocol):
    """Receives one mapping of scalar metrics per call; ``close`` flushes and releases."""

    def log(self, step: int, metrics: Mapping[str, float]) -> None: ...

    def close(self) -> None: ...


class MetricsFanout:
    """Sends each call to every sink, in order; itself a ``MetricsSink``.

    Values are converted with ``float()`` once here (so 0-d tensors and numpy
    scalars are fine); a value that cannot be converted raises. A failing sink
    raises too: a run whose metrics are not being recorded should not go on.
    """

    def __init__(self, sinks: list[MetricsSink]) -> None:
        self.sinks = list(sinks)

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"metrics step must be an int >= 0, got {step!r}")
        clean = {name: _as_float(name, value) for name, value in metrics.items()}
        for sink in self.sinks:
            sink.log(step, clean)

    def close(self) -> None:
        """Close every sink, even if one fails; then raise the first failure."""
        first: BaseException | None = None
        for sink in self.sinks:
            try:
                sink.close()
            except Exception as e:
                first = first or e
        self.sinks.clear()
        if first is not None:
            raise first

    def __enter__(self) -> MetricsFanout:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def make_sinks(
    cfg: MetricsConfig,
    *,
    run_dir: Path,
    run_name: str,
    config_dict: dict,
    resume_step: int | None = None,
) -> MetricsFanout:
    """Build the run's sinks: JSON lines always, TensorBoard, W&B and MLflow as configured.

    ``config_dict`` must already be redacted; it goes to W&B, MLflow and TensorBoard as is.
    ``resume_step``: the step of the checkpoint being resumed (``NO_CHECKPOINT``: none was
    found); metrics a crashed process logged after it are dropped from metrics.jsonl and
    hidden in TensorBoard. The trainer writes a step's line before its checkpoint, so a
    resumed metrics.jsonl has every step up to the checkpoint's and none past it. W&B and
    MLflow are append-only histories: W&B ignores a step below its run's newest (the
    crashed process's values stay for those steps), MLflow keeps both values.
    """
    run_dir = Path(run_dir)
    sinks: list[MetricsSink] = []
    try:
        jsonl = JsonlSink(run_dir / METRICS_FILE)
        if resume_step is not None:
            jsonl.truncate_after(resume_step)
        sinks.append(jsonl)
        if cfg.wandb.project:
            from grouprl.metrics.wandb_sink import WandbSink

            sinks.append(
                WandbSink(cfg.wandb, run_dir=run_dir, run_name=run_name, config_dict=config_dict)
            )
        if cfg.mlflow.enabled:
            from grouprl.metrics.mlflow_sink import MlflowSink

            sinks.append(
                MlflowSink(cfg.mlflow, run_dir=run_dir, run_name=run_name, config_dict=config_dict)
            )
        if cfg.tensorboard:
            from grouprl.metrics.tensorboard import TensorBoardSink

            purge = None if resume_step is None else resume_step + 1
            sinks.append(
                TensorBoardSink(
                    run_dir / TENSORBOARD_DIR, purge_step=purge, config_dict=config_dict
                )
            )
    except BaseException:
        for sink in sinks:
            sink.close()
        raise
    return MetricsFanout(sinks)


def _as_float(name: str, value: Any) -> float:
    if name in RESERVED_KEYS:
        raise ValueError(f"metric name {name!r} is reserved in metrics.jsonl; rename it")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(
            f"metric {name!r} must be a number, got {type(value).__name__}: {value!r:.80}"
        ) from None
