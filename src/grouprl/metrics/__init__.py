"""Observability for training runs: metrics sinks, progress display, samples, report.

Importing this package loads neither torch, tensorboard, wandb nor matplotlib;
each backend imports its library when it is built.
"""

from grouprl.metrics.console import ConsoleSink
from grouprl.metrics.jsonl import JsonlSink, read_jsonl
from grouprl.metrics.progress import TrainProgress
from grouprl.metrics.report import write_report
from grouprl.metrics.samples import SampleRecord, SamplesWriter
from grouprl.metrics.sinks import MetricsFanout, MetricsSink, make_sinks
from grouprl.metrics.wandb_sink import WandbNotInstalledError

__all__ = [
    "ConsoleSink",
    "JsonlSink",
    "MetricsFanout",
    "MetricsSink",
    "SampleRecord",
    "SamplesWriter",
    "TrainProgress",
    "WandbNotInstalledError",
    "make_sinks",
    "read_jsonl",
    "write_report",
]
