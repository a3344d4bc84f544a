"""A preempted async run (SIGTERM, `grouprl train`'s path in this process) stops the
round its rollout stream has in flight after the segment in flight, before the emergency
save: no engine call starts after the stop, the checkpoint lists the round as unfinished
(a resume generates it again, same seeds: tests/unit/test_stream_abort.py), and no
sample of it is trained or written to samples.jsonl.

The transformers engine on the tiny model, each of its calls made SEGMENT_S slower, so
that a round of 6 segments is in flight whenever a step ends."""

from __future__ import annotations

import functools
import json
import logging
import os
import signal
import time

import pytest

from grouprl.ckpt.export import find_checkpoint
from grouprl.ckpt.preempt import Preempted
from grouprl.ckpt.state import TRAINER_FILE
from grouprl.config.loader import load_config
from grouprl.driver import run
from grouprl.driver.run import train
from grouprl.driver.stream import Stream
from grouprl.engines.hf_engine import HFEngine
from grouprl.workers.policy import PolicyWorker

pytestmark = pytest.mark.timeout(300)
BATCH = 2
SEGMENT_S = 0.3


def test_sigterm_stops_the_round_in_flight_before_the_save(
    tmp_path, tiny_model_dir, monkeypatch, caplog
):
    calls: list[tuple[float, float]] = []  # each engine call's start and end
    stops: list[float] = []
    saves: list[float] = []
    generate, update, stop, save = HFEngine.generate, PolicyWorker.update, Stream.stop, run.save

    @functools.wraps(generate)
    def slow_generate(self, *args, **kwargs):
        start = time.monotonic()
        time.sleep(SEGMENT_S)
        try:
            return generate(self, *args, **kwargs)
        finally:
            calls.append((start, time.monotonic()))

    @functools.wraps(update)
    def preempted_update(self, *args, **kwargs):
        if not stops:  # the first update: as a spot machine's notice would
            os.kill(os.getpid(), signal.SIGTERM)
        return update(self, *args, **kwargs)

    @functools.wraps(stop)
    def timed_stop(self):
        stops.append(time.monotonic())
        return stop(self)

    @functools.wraps(save)
    def timed_save(*args, **kwargs):
        saves.append(time.monotonic())
        return save(*args, **kwargs)

    monkeypatch.setattr(HFEngine, "generate", slow_generate)
    monkeypatch.setattr(run, "save", timed_save)
    monkeypatch.setattr(PolicyWorker, "update", preempted_update)
    monkeypatch.setattr(Stream, "stop", timed_stop)
    run_dir = tmp_path / "run"
    cfg = load_config(
        "tiny-arith",
        [
            f"model.path={tiny_model_dir}",
            "rollout.engine=hf",
            "rollout.n=2",
            "rollout.max_tokens=24",
            "rollout.max_staleness=1",
            "rollout.partial_rollout_tokens=4",
            f"data.batch_size={BATCH}",
            "data.train.limit=16",
            "data.eval=null",
            "train.mini_batch_size=4",
            "train.micro_batch_size=4",
            "train.steps=8",
            "train.num_threads=1",
            "reward.sandbox.workers=1",
            "checkpoint.grace_period_s=300",  # the test's timeout ends a hang, not os._exit
            f"trainer.log_samples={BATCH}",
            "trainer.eval_before_train=false",
            "metrics.progress=false",
            "metrics.tensorboard=false",
            f"trainer.run_dir={run_dir}",
        ],
    )
    with caplog.at_level(logging.INFO), pytest.raises(Preempted, match="checkpoint saved"):
        train(cfg)

    stopped = stops[0]
    assert stopped < saves[-1]  # the stream stopped before the emergency save began
    assert not [c for c in calls if c[0] > stopped], "an engine call started after the stop"
    last_end = max(end for _, end in calls)
    assert last_end - stopped < 3 * SEGMENT_S  # the segment in flight, not the round
    assert "stops after its segment in flight (rollout.partial_rollout_tokens=4)" in caplog.text

    checkpoint = find_checkpoint(run_dir)
    assert checkpoint.name == "step_000001"
    stream = json.loads((checkpoint / TRAINER_FILE).read_text())["stream"]
    assert len(stream["unfinished"]) == 1 and stream["counts"]["dropped_stale"] == 0
    unfinished = set(stream["unfinished"][0]["rows"])
    records = [json.loads(x) for x in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert {r["step"] for r in records} == {1}
    assert not unfinished & {r["prompt_index"] for r in records}
