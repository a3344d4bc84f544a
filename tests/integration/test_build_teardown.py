"""A run's build closes what it started when a later part fails (train, eval, and the
Python API through them): each part's start is made to raise in turn, after the parts
before it started, and then no worker process, engine, training rank or thread of the
run is left, the parts closed newest first, and the caller gets the very error raised.
Tiny model, transformers engine, training ranks in this process (no Ray)."""

from __future__ import annotations

import textwrap
import threading
import time

import psutil
import pytest

import grouprl
import grouprl.driver.run as run
import grouprl.rollout.builder as builder
from grouprl.config.loader import load_config
from grouprl.driver.stream import Stream
from grouprl.engines.replicas import ReplicaSet
from grouprl.envs.contained import ContainedEnv
from grouprl.envs.single_turn import SingleTurnEnv
from grouprl.rollout.episode_scores import TimedScore
from grouprl.workers.group import LocalGroup


class Boom(RuntimeError):
    """The error a part's start raises; it must reach the caller as it is."""


class ClosingEnv(SingleTurnEnv):
    """The single-turn environment, with a ``close`` (as a contained one has)."""

    def close(self) -> None:
        pass


# every part's class with a close, and the name it is logged under when closed
CLOSEABLE = [
    (ClosingEnv, "env"),
    (ContainedEnv, "env"),
    (LocalGroup, "ranks"),
    (ReplicaSet, "engine"),
    (TimedScore, "scorer"),
    (Stream, "stream"),
]

# each part's start, in the order build starts them, and what is closed when it fails
STARTS = [
    (run, "load_tokenizer", []),
    (builder, "make_env", []),
    (builder, "load_prompt_set", ["env"]),
    (run, "make_group", ["env"]),
    (LocalGroup, "add", ["ranks", "env"]),  # the policy on the ranks
    (builder, "start_engine", ["ranks", "env"]),
    (builder, "RewardScorer", ["engine", "ranks", "env"]),
    (builder, "make_rollout", ["scorer", "engine", "ranks", "env"]),
    (run, "Stream", ["scorer", "engine", "ranks", "env"]),
]
EVERY_PART = ["stream", "scorer", "engine", "ranks", "env"]


def _config(tmp_path, tiny_model_dir, *extra: str):
    return load_config(
        "tiny-arith",
        [
            f"model.path={tiny_model_dir}",
            "rollout.engine=hf",
            "rollout.n=2",
            "rollout.max_tokens=8",
            "rollout.max_staleness=1",  # the rollout stream: a thread of its own
            "algo.tis_cap=2.0",
            "data.batch_size=2",
            "data.train.limit=4",
            "data.eval.limit=2",
            "train.mini_batch_size=4",
            "train.micro_batch_size=4",
            "train.steps=1",
            "metrics.progress=false",
            f"trainer.run_dir={tmp_path / 'run'}",
            *extra,
        ],
    )


def _workers() -> set[int]:
    """This process's child processes, but multiprocessing's resource tracker (started
    with the first spawned process, it outlives them by design)."""
    pids = set()
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in " ".join(
                child.cmdline()
            ):
                pids.add(child.pid)
        except psutil.NoSuchProcess:
            pass
    return pids


def _left_after(before: set[int]) -> set[int]:
    """The child processes started since ``before`` still there (given a moment to exit)."""
    deadline = time.monotonic() + 5.0
    while (left := _workers() - before) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _threads_left(before: set[threading.Thread]) -> list[str]:
    """The threads started since ``before`` still running (the rollout stream's, the
    checkpointer's writer, a pool's manager)."""
    return [t.name for t in set(threading.enumerate()) - before if t.is_alive()]


@pytest.fixture
def closed(monkeypatch) -> list[str]:
    """The parts closed, in order: each class's own ``close``, logged; the environment is
    ``ClosingEnv`` (``make_env``'s result replaced), so that it has one to close."""
    log: list[str] = []
    for cls, name in CLOSEABLE:

        def close(self, *args, _close=cls.close, _name=name, **kwargs):
            log.append(_name)
            return _close(self, *args, **kwargs)

        monkeypatch.setattr(cls, "close", close)
    monkeypatch.setattr(
        builder, "make_env", lambda env, data, *, cache_dir: ClosingEnv.from_data(data)
    )
    return log


def _fail(monkeypatch, where, name: str) -> Boom:
    boom = Boom(f"{name} failed")

    def raise_(*args, **kwargs):
        raise boom

    monkeypatch.setattr(where, name, raise_)
    return boom


@pytest.mark.parametrize(("where", "name", "expected"), STARTS, ids=[name for _, name, _ in STARTS])
def test_a_part_that_fails_to_start_closes_those_before_it_newest_first(
    where, name, expected, closed, monkeypatch, tmp_path, tiny_model_dir
):
    cfg = _config(tmp_path, tiny_model_dir)
    boom = _fail(monkeypatch, where, name)
    before, threads = _workers(), set(threading.enumerate())
    with pytest.raises(Boom) as raised, run.build(cfg):
        pytest.fail("the build should have failed")
    assert raised.value is boom
    assert closed == expected
    assert not _left_after(before) and not _threads_left(threads)


def test_an_error_in_the_run_closes_every_part_and_the_reward_workers(
    closed, tmp_path, tiny_model_dir
):
    cfg = _config(tmp_path, tiny_model_dir)
    before, threads = _workers(), set(threading.enumerate())
    boom = Boom("the loop failed")
    with pytest.raises(Boom) as raised, run.build(cfg) as c:
        c.score(completions=["#### 3"], rows=c.train_set.rows[:1], group_size=1)
        assert _workers() - before  # the reward workers run
        raise boom
    assert raised.value is boom
    assert closed == EVERY_PART
    assert not _left_after(before) and not _threads_left(threads)


ENV = textwrap.dedent(
    """
    from grouprl.envs import Step

    class Echo:
        def episode(self, row):
            return Episode(row)

    class Episode:
        def __init__(self, row):
            self.row = row

        def start(self):
            return [{"role": "user", "content": self.row["question"]}]

        def step(self, text):
            return Step(done=True)
    """
)


def test_a_contained_environments_workers_stop_when_a_later_part_fails(
    monkeypatch, tmp_path, tiny_model_dir
):
    (tmp_path / "echo.py").write_text(ENV)
    cfg = _config(
        tmp_path, tiny_model_dir, f"env.name={tmp_path / 'echo.py'}:Echo", "env.sandbox.workers=1"
    )
    started: list[set[int]] = []
    start_engine = builder.start_engine

    def engine_once_the_env_runs(*args, **kwargs):
        started.append(_workers() - before)
        return start_engine(*args, **kwargs)

    monkeypatch.setattr(builder, "start_engine", engine_once_the_env_runs)
    boom = _fail(monkeypatch, run, "Stream")
    before = _workers()
    with pytest.raises(Boom) as raised, run.build(cfg):
        pass
    assert raised.value is boom
    assert started and started[0]  # the environment's worker ran when the engine started
    assert not _left_after(before)


def test_train_through_the_python_api_closes_what_started(
    closed, monkeypatch, tmp_path, tiny_model_dir
):
    cfg = _config(tmp_path, tiny_model_dir)
    boom = _fail(monkeypatch, builder, "start_engine")
    before, threads = _workers(), set(threading.enumerate())
    with pytest.raises(Boom) as raised:
        grouprl.train(cfg)
    assert raised.value is boom
    assert closed == ["ranks", "env"]
    assert not _left_after(before) and not _threads_left(threads)


def test_evaluate_through_the_python_api_closes_what_started(
    closed, monkeypatch, tmp_path, tiny_model_dir
):
    cfg = _config(tmp_path, tiny_model_dir)
    boom = _fail(monkeypatch, builder, "make_rollout")
    before, threads = _workers(), set(threading.enumerate())
    with pytest.raises(Boom) as raised:
        grouprl.evaluate(tiny_model_dir, cfg)
    assert raised.value is boom
    assert closed == ["scorer", "engine", "env"]
    assert not _left_after(before) and not _threads_left(threads)
