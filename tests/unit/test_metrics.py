"""Metrics sinks, progress lines, samples and the run report."""

from __future__ import annotations

import json
import math
import sys
from io import StringIO
from pathlib import Path

import pytest
import torch
from rich.console import Console

from grouprl.config.observe import MetricsConfig, WandbConfig
from grouprl.metrics.console import ConsoleSink, hardware_fields
from grouprl.metrics.jsonl import JsonlSink, read_jsonl
from grouprl.metrics.progress import TrainProgress
from grouprl.metrics.report import write_report
from grouprl.metrics.samples import SamplesWriter
from grouprl.metrics.sinks import NO_CHECKPOINT, MetricsFanout, make_sinks
from grouprl.metrics.telemetry import ModelShape, datasheet_tflops, pass_flops, rank_memory_metrics
from grouprl.metrics.wandb_sink import WandbNotInstalledError

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class RecordingSink:
    def __init__(self) -> None:
        self.calls: list[tuple[int, dict[str, float]]] = []
        self.closed = False

    def log(self, step: int, metrics) -> None:
        self.calls.append((step, dict(metrics)))

    def close(self) -> None:
        self.closed = True


def _train_metrics(step: int) -> dict[str, float]:
    return {"reward/mean": 0.1 * step, "accuracy": 0.05 * step, "kl": 0.0, "time/step_s": 3.0}


def test_jsonl_writes_one_object_per_call_and_reads_back(tmp_path: Path) -> None:
    sink = JsonlSink(tmp_path / "metrics.jsonl")
    sink.log(0, {"eval/accuracy": 0.25})
    sink.log(1, {"reward/mean": 0.5, "loss": float("nan")})
    sink.close()

    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)  # strict JSON: NaN is written as null
    assert first["step"] == 0 and first["eval/accuracy"] == 0.25
    assert second["step"] == 1 and second["reward/mean"] == 0.5 and second["loss"] is None
    assert isinstance(second["wall_time"], float)


def test_jsonl_truncate_after_drops_later_steps_and_appends_continue(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    sink = JsonlSink(path)
    for step in range(6):
        sink.log(step, {"reward/mean": float(step)})
    with path.open("a") as f:
        f.write('{"step": 6, "rew')  # a write torn by a crash

    resumed = JsonlSink(path)  # drops the torn tail
    assert resumed.truncate_after(3) == 2
    resumed.log(4, {"reward/mean": 40.0})

    records = read_jsonl(path)
    assert [r["step"] for r in records] == [0, 1, 2, 3, 4]
    assert records[-1]["reward/mean"] == 40.0


def test_fanout_calls_every_sink_with_floats_and_closes_all(tmp_path: Path) -> None:
    a, b = RecordingSink(), RecordingSink()
    fanout = MetricsFanout([a, b])
    fanout.log(3, {"reward/mean": 1, "kl": 0.5})
    fanout.close()

    for sink in (a, b):
        assert sink.calls == [(3, {"reward/mean": 1.0, "kl": 0.5})]
        assert type(sink.calls[0][1]["reward/mean"]) is float
        assert sink.closed


def test_fanout_rejects_bad_values_and_reserved_names() -> None:
    fanout = MetricsFanout([RecordingSink()])
    with pytest.raises(TypeError, match="'reward/mean' must be a number"):
        fanout.log(1, {"reward/mean": "high"})
    with pytest.raises(ValueError, match="reserved"):
        fanout.log(1, {"step": 1.0})
    with pytest.raises(ValueError, match="step must be an int"):
        fanout.log(-1, {"kl": 0.0})


def test_tensorboard_scalars_read_back_by_event_accumulator(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = MetricsConfig(tensorboard=True, progress=False)
    sinks = make_sinks(cfg, run_dir=tmp_path, run_name="t", config_dict={"algo": {"beta": 0.0}})
    sinks.log(0, {"eval/accuracy": 0.2})
    sinks.log(1, {"reward/mean": 0.25, "kl": 0.001})
    sinks.log(2, {"reward/mean": 0.75, "kl": 0.002})
    sinks.close()

    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert {"reward/mean", "kl", "eval/accuracy"} <= set(acc.Tags()["scalars"])
    rewards = [(e.step, e.value) for e in acc.Scalars("reward/mean")]
    assert rewards == [(1, 0.25), (2, 0.75)]
    assert [(e.step, e.value) for e in acc.Scalars("eval/accuracy")] == [(0, pytest.approx(0.2))]
    assert len(read_jsonl(tmp_path / "metrics.jsonl")) == 3


def test_a_resume_without_a_checkpoint_drops_every_line_of_the_killed_session(
    tmp_path: Path,
) -> None:
    cfg = MetricsConfig(tensorboard=False, progress=False)
    killed = make_sinks(cfg, run_dir=tmp_path, run_name="t", config_dict={})
    killed.log(0, {"eval/accuracy": 0.2})  # killed before its first checkpoint
    killed.log(1, {"reward/mean": 0.25})
    killed.close()

    kept = make_sinks(cfg, run_dir=tmp_path, run_name="t", config_dict={}, resume_step=0)
    kept.close()  # a checkpoint of step 0 keeps step 0's validation
    assert [r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [0]
    fresh = make_sinks(
        cfg, run_dir=tmp_path, run_name="t", config_dict={}, resume_step=NO_CHECKPOINT
    )
    fresh.log(0, {"eval/accuracy": 0.3})  # validated again: one line for step 0
    fresh.close()
    assert read_jsonl(tmp_path / "metrics.jsonl")[0]["eval/accuracy"] == 0.3
    assert len(read_jsonl(tmp_path / "metrics.jsonl")) == 1


def test_make_sinks_without_tensorboard_writes_only_jsonl(tmp_path: Path) -> None:
    sinks = make_sinks(
        MetricsConfig(tensorboard=False), run_dir=tmp_path, run_name="t", config_dict={}
    )
    assert [type(sink) for sink in sinks.sinks] == [JsonlSink]
    sinks.close()
    assert not (tmp_path / "tensorboard").exists()


def test_wandb_configured_but_missing_is_a_user_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb now raises ImportError
    cfg = MetricsConfig(tensorboard=False, wandb=WandbConfig(project="grpo-demo"))
    with pytest.raises(WandbNotInstalledError) as info:
        make_sinks(cfg, run_dir=tmp_path, run_name="t", config_dict={})
    assert info.value.user_error is True
    message = str(info.value)
    assert "pip install grouprl[wandb]" in message and "metrics.wandb.project" in message


def test_progress_without_tty_prints_one_line_per_step() -> None:
    out = StringIO()
    console = Console(file=out, force_terminal=False, width=60)
    with TrainProgress(total_steps=3, console=console, min_interval_s=0.0) as progress:
        assert not progress.live
        progress.update(0, {"eval/accuracy": 0.125, "eval/reward_mean": 0.1})
        for step in (1, 2, 3):
            progress.update(step, _train_metrics(step))
        progress.log("saved checkpoint [step 3]")

    lines = out.getvalue().splitlines()
    assert lines[0] == "eval step 0/3 acc 0.125 reward 0.100"
    assert lines[1].startswith("step 1/3 reward 0.100 acc 0.050 kl 0.0000 3.0s/step")
    assert "eval acc 0.125" in lines[1] and lines[1].endswith("eta 0:06")
    assert lines[3].startswith("step 3/3 reward 0.300")
    assert lines[4] == "saved checkpoint [step 3]"  # markup is not interpreted
    assert len(lines) == 5  # no wrapping at the 60-column width


def test_console_lines_are_rate_limited_but_keep_last_step() -> None:
    out = StringIO()
    clock = iter(float(t) for t in range(100))
    sink = ConsoleSink(
        Console(file=out, force_terminal=False),
        total_steps=5,
        min_interval_s=1000.0,
        clock=lambda: next(clock),
    )
    for step in range(1, 6):
        sink.log(step, _train_metrics(step))
    steps = [line.split()[1] for line in out.getvalue().splitlines()]
    assert steps == ["1/5", "5/5"]


def test_progress_on_a_terminal_draws_a_bar() -> None:
    out = StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    with TrainProgress(total_steps=4, console=console) as progress:
        assert progress.live
        progress.update(1, _train_metrics(1))
        progress.update(2, _train_metrics(2))
    text = out.getvalue()
    assert "2/4" in text and "reward 0.200" in text


def test_samples_writer_appends_tagged_records(tmp_path: Path) -> None:
    writer = SamplesWriter(tmp_path)
    record = {
        "prompt": "What is 2+3?",
        "completion": "#### 5",
        "reward": 1.0,
        "reward_parts": {"math_answer": 1.0, "format": float("nan")},
        "correct": True,
        "finish_reason": "stop",
    }
    writer.write(1, [record])
    writer.write(2, [record, {**record, "correct": False, "reward": 0.0}])
    assert writer.truncate_after(1) == 2
    writer.write(2, [record])

    lines = read_jsonl(tmp_path / "samples.jsonl")
    assert [r["step"] for r in lines] == [1, 2]
    assert lines[0]["completion"] == "#### 5" and lines[0]["reward_parts"]["format"] is None


def _write_metrics(run_dir: Path, steps: int, *, with_eval: bool) -> None:
    sink = JsonlSink(run_dir / "metrics.jsonl")
    if with_eval:
        sink.log(0, {"eval/accuracy": 0.1, "eval/reward_mean": 0.1})
    for step in range(1, steps + 1):
        sink.log(step, {"reward/mean": 0.1 + 0.02 * step, "accuracy": 0.01 * step})
    if with_eval:
        sink.log(steps // 2, {"eval/accuracy": 0.625, "eval/reward_mean": 0.6})
        sink.log(steps, {"eval/accuracy": 0.5, "eval/reward_mean": 0.55})


def _check_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert 10_000 < len(data) < 2_000_000


def test_report_writes_png_and_html_with_eval_numbers(tmp_path: Path) -> None:
    run_dir = tmp_path / "arith-demo"
    run_dir.mkdir()
    _write_metrics(run_dir, 20, with_eval=True)

    png_path, html_path = write_report(run_dir)
    assert png_path == run_dir / "reward_curve.png"
    _check_png(png_path)
    page = html_path.read_text()
    assert "<title>arith-demo" in page and "data:image/png;base64," in page
    assert "0.1000 (step 0)" in page  # first
    assert "0.5000 (step 20)" in page  # last
    assert "0.6250 (step 10)" in page  # best


@pytest.mark.parametrize("steps", [1, 3])
def test_report_without_eval_or_with_one_step(tmp_path: Path, steps: int) -> None:
    _write_metrics(tmp_path, steps, with_eval=False)
    png_path, html_path = write_report(tmp_path, run_name="short")
    _check_png(png_path)
    page = html_path.read_text()
    assert "no validation logged" in page and "<h1>short</h1>" in page


def test_report_needs_a_metrics_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"metrics.jsonl"):
        write_report(tmp_path)


def test_number_formatting_keeps_tiny_kl_visible() -> None:
    from grouprl.metrics.console import format_number

    assert format_number(0.0, 4) == "0.0000"
    assert format_number(2.5e-6, 4) == "2.5e-06"
    assert format_number(math.nan, 3) == "nan"


def test_model_flops_of_a_pass_count_real_tokens_only() -> None:
    """Two rows of 3 and 5 real tokens (padded to 6), 4 scored: the weights see 8
    tokens, the head 4 (never a row's first), attention 3^2 + 5^2 per layer."""
    shape = ModelShape(matmul_weights=1000, vocab=50, hidden=8, layers=2)
    attention_BT = torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0]])
    loss_BT = torch.tensor([[0, 1, 1, 0, 0, 0], [1, 0, 0, 1, 1, 0]]).float()
    flops = pass_flops(shape, attention_BT, loss_BT)
    assert flops.weights == 6 * 1000 * 8
    assert flops.head == 6 * 50 * 8 * 4
    assert flops.attention == 6 * (9 + 25) * 8 * 2
    assert flops.total == flops.weights + flops.head + flops.attention


@pytest.mark.parametrize(
    ("gpu", "tflops"),
    [
        ("NVIDIA H100 80GB HBM3", 989.0),
        ("NVIDIA H100 PCIe", 756.0),
        ("NVIDIA H200", 989.0),
        ("NVIDIA H20", 148.0),
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("NVIDIA L4", 121.0),
        ("NVIDIA L40S", 362.0),
        ("NVIDIA GeForce RTX 4090", None),
    ],
)
def test_a_gpu_peak_is_its_own_datasheet_row(gpu: str, tflops: float | None) -> None:
    assert datasheet_tflops(gpu, "bfloat16") == tflops


def test_memory_is_the_busiest_ranks_and_each_ranks_own() -> None:
    ranks = [
        {"peak_reserved_gib": 20.0, "reserved_gib": 9.0},
        {"peak_reserved_gib": 27.5, "reserved_gib": 8.0},
    ]
    out = rank_memory_metrics(ranks)
    assert out["memory/peak_reserved_gib"] == 27.5 and out["memory/reserved_gib"] == 9.0
    assert out["memory/rank_1/peak_reserved_gib"] == 27.5
    assert rank_memory_metrics(ranks[:1]) == {
        "memory/peak_reserved_gib": 20.0,
        "memory/reserved_gib": 9.0,
    }


def test_the_step_line_shows_mfu_and_the_memory_peak() -> None:
    gpu = {"perf/mfu": 0.314, "memory/peak_reserved_gib": 27.61, "memory/host_rss_gib": 3.0}
    assert hardware_fields(gpu) == ["mfu 31%", "gpu 27.6G"]
    assert hardware_fields({"memory/host_rss_gib": 0.71}) == ["rss 0.7G"]
    assert hardware_fields({"perf/mfu": float("nan")}) == []


def test_the_eval_line_leaves_off_episode_counts_that_are_zero() -> None:
    from grouprl.metrics.console import format_eval_line

    metrics = {
        "eval/accuracy": 0.5,
        "eval/reward_errors": 0.0,
        "eval/episode/turns": 1.0,
        "eval/episode/tool_calls": 0.0,
        "eval/episode/stop/answered": 0.75,
        "eval/episode/stop/max_tokens": 0.25,
        "eval/episode/stop/env_error": 0.0,
    }
    line = format_eval_line(4, metrics)
    assert line == (
        "eval step 4 acc 0.500 reward_errors 0.000 episode/turns 1.000 "
        "episode/stop/answered 0.750 episode/stop/max_tokens 0.250"
    )
