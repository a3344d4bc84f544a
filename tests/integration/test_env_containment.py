"""A user environment runs in worker processes: a step that hangs, raises, exits the
process or returns the wrong type ends only its episode (``env_error``, counted and logged
with the sample and prompt index). The episodes that shared its worker go on: those it
held when the worker was killed are replayed on the replacement from their rows and turns
(``envs/contained.py``), and each finishes with the reward its own row earns."""

import logging
import textwrap
import time

import pytest
from transformers import AutoTokenizer

from grouprl.config.env import EnvConfig
from grouprl.config.model_data import DataConfig
from grouprl.engines.base import SamplingSettings
from grouprl.envs.factory import make_env
from grouprl.rollout.episodes import episode_metrics, run_episodes
from grouprl.rollout.setup import zero_failed_episodes
from grouprl.types import Completion, RewardParts, Trajectory, Turn

MEMORY_MB = 512
DEADLINE_S = 1.0

ENV = textwrap.dedent(
    """
    import asyncio, os, time
    from grouprl.envs import Step

    LOCK = asyncio.Lock()  # one event loop per worker: contended across calls, it works

    class Modes:
        def __init__(self, *, ok_reward: float = 0.5):
            self.ok_reward = ok_reward

        def episode(self, row):
            return (Awaited if row.get("awaited") else Episode)(self, row)

    class Alone(Modes):
        replayable = False

    class Episode:
        def __init__(self, env, row):
            self.env, self.row, self.seen = env, row, []

        def start(self):
            return [{"role": "user", "content": "q"}]

        def step(self, text):
            self.seen.append(text)
            if text == "sleep":
                time.sleep(60)
            if text == "nap":
                time.sleep(0.5)
            if text == "exit":
                os._exit(7)
            if text == "raise":
                raise ValueError("bad step")
            if text == "wrong":
                return "not a Step"
            if text == "allocate":
                held = []
                while True:
                    held.append(bytearray(50 * 1024 * 1024))
            return self.answer()

        def answer(self):
            info = {"pid": os.getpid(), "seen": list(self.seen)}
            if len(self.seen) < self.row["turns"]:
                return Step(messages=[{"role": "user", "content": "go on"}], info=info)
            return Step(reward=self.env.ok_reward + self.row["value"], done=True, info=info)

    class Awaited(Episode):
        async def step(self, text):
            self.seen.append(text)
            async with LOCK:
                await asyncio.sleep(0.05)
            return self.answer()
    """
)


class Scripted:
    """An engine that answers episode i (its prompt is ``[100 + i]``) with the next text
    of ``scripts[i]``."""

    weight_version = 0

    def __init__(self, scripts):
        self.scripts, self.turns = scripts, [0] * len(scripts)

    def generate(self, contexts, settings):
        out = []
        for context in contexts:
            i = context[0] - 100
            text, self.turns[i] = self.scripts[i][self.turns[i]], self.turns[i] + 1
            out.append([Completion(token_ids=[5], logprobs=[0.0], finish_reason="stop", text=text)])
        return out


def _make(tmp, name, **sandbox):
    cfg = EnvConfig(
        name=f"{tmp / 'modes.py'}:{name}",
        sandbox={"workers": 2, "memory_mb": MEMORY_MB, "timeout_s": DEADLINE_S, **sandbox},
    )
    return make_env(cfg, DataConfig(), cache_dir=tmp)


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="module")
def env_file(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("env")
    (tmp / "modes.py").write_text(ENV)
    return tmp


@pytest.fixture(scope="module")
def contained(env_file):
    env = _make(env_file, "Modes")
    yield env
    env.close()


def _run(env, tokenizer, scripts, **row):
    """One episode per script (prompt index 10 + i, value i), as many turns as its texts."""
    rows = [
        {"_index": 10 + i, "value": i, "turns": len(script), **row}
        for i, script in enumerate(scripts)
    ]
    return run_episodes(
        engine=Scripted(scripts),
        env=env,
        tokenizer=tokenizer,
        rows=rows,
        prompts=[[100 + i] for i in range(len(rows))],
        settings=SamplingSettings(group_size=1, max_tokens=8),
        max_turns=max(len(s) for s in scripts),
        max_model_len=512,
    )


def _errors(trajectories):
    return [t.turns[-1].info.get("env_error", "") for t in trajectories]


def test_a_hanging_or_raising_step_ends_only_its_episode(contained, tokenizer, caplog):
    modes = ["ok", "sleep", "raise", "ok", "wrong", "ok", "ok"]
    started = time.perf_counter()
    with caplog.at_level(logging.WARNING, logger="grouprl.rollout.episodes"):
        trajectories = _run(contained, tokenizer, [[m] for m in modes])
    assert time.perf_counter() - started < 20  # the sleep(60) was not waited for
    failed = {1, 2, 4}
    stops = [t.stop_reason for t in trajectories]
    assert stops == ["env_error" if i in failed else "answered" for i in range(7)]
    rewards = [t.turns[0].reward for i, t in enumerate(trajectories) if i not in failed]
    assert rewards == [0.5 + i for i in range(7) if i not in failed]  # env.args default too
    errors = _errors(trajectories)
    assert "timed out" in errors[1] and f"{DEADLINE_S:g}s deadline" in errors[1]
    assert "ValueError: bad step" in errors[2]
    assert "not a grouprl.envs.Step" in errors[4]
    assert "sample 1 (prompt index 11)" in caplog.text
    assert episode_metrics(trajectories)["episode/env_errors"] == 3


@pytest.mark.parametrize("mode", ["sleep", "exit"], ids=["hangs", "crashes"])
def test_seven_episodes_one_hangs_or_crashes_six_finish_with_their_own_rewards(
    contained, tokenizer, mode
):
    # episodes go round the 2 workers: turn 1 of episode 1 kills its worker, which holds
    # episodes 3 and 5 (mid-step, or between steps); they are replayed on its replacement
    scripts = [["a", "b", "c"] for _ in range(7)]
    scripts[1] = ["a", mode, "c"]
    restarts = contained.pool.stats()["restarts"]
    trajectories = _run(contained, tokenizer, scripts)
    assert [t.stop_reason for t in trajectories] == ["answered"] + ["env_error"] + ["answered"] * 5
    assert "timed out" in _errors(trajectories)[1] or "code 7" in _errors(trajectories)[1]
    finished = [t for i, t in enumerate(trajectories) if i != 1]
    assert [t.turns[-1].reward for t in finished] == [0.5 + i for i in (0, 2, 3, 4, 5, 6)]
    assert all(t.turns[-1].info["seen"] == ["a", "b", "c"] for t in finished)
    assert contained.pool.stats()["restarts"] > restarts
    for i in (3, 5):  # on the replaced worker: the episode's first and last step differ
        first, last = trajectories[i].turns[0].info["pid"], trajectories[i].turns[-1].info["pid"]
        assert first != last, f"episode {i} stayed on pid {first}"


def test_steps_of_different_episodes_run_at_once_in_each_worker(contained, tokenizer):
    started = time.perf_counter()
    trajectories = _run(contained, tokenizer, [["nap"]] * 8)  # 4 naps of 0.5 s per worker
    elapsed = time.perf_counter() - started
    assert [t.stop_reason for t in trajectories] == ["answered"] * 8
    assert elapsed < 1.5, f"8 steps of 0.5 s on 2 workers took {elapsed:.2f}s: one at a time?"


def test_an_async_step_runs_on_the_workers_one_event_loop(env_file, tokenizer):
    # a module-level asyncio.Lock, contended by 8 steps at once: bound to one loop, it
    # fails ("bound to a different event loop") if each call ran its own. Workers of its
    # own with a roomy deadline: this is about the loop, and 8 contended steps on a loaded
    # machine once passed the module's 1 s (CI, 2026-12-02: 4 of 8 timed out)
    env = _make(env_file, "Modes", timeout_s=30)
    try:
        trajectories = _run(env, tokenizer, [["x", "y"]] * 8, awaited=True)
    finally:
        env.close()
    assert [t.stop_reason for t in trajectories] == ["answered"] * 8, _errors(trajectories)
    assert [t.turns[-1].reward for t in trajectories] == [0.5 + i for i in range(8)]


def test_an_async_step_runs_in_process_too(env_file, tokenizer):
    env = _make(env_file, "Modes", workers=0)  # uncontained: steps on this process's loop
    trajectories = _run(env, tokenizer, [["x", "y"]] * 4, awaited=True)
    assert [t.turns[-1].reward for t in trajectories] == [0.5 + i for i in range(4)]


def test_an_environment_that_is_not_replayable_gives_each_episode_a_worker(env_file, tokenizer):
    env = _make(env_file, "Alone", workers=1)
    try:
        assert env.replayable is False
        trajectories = _run(env, tokenizer, [["a", "sleep"], ["a", "b"]])
        shared = set(env.pool.pids())
    finally:
        env.close()
    assert [t.stop_reason for t in trajectories] == ["env_error", "answered"]
    assert "timed out" in _errors(trajectories)[0]
    assert trajectories[1].turns[-1].reward == 1.5
    pids = [t.turns[0].info["pid"] for t in trajectories]
    assert len(set(pids)) == 2 and not shared & set(pids), (pids, shared)


def test_a_step_that_exits_or_runs_out_of_memory_ends_its_episode_and_the_next_runs(
    contained, tokenizer
):
    trajectories = _run(contained, tokenizer, [["exit"], ["allocate"]])
    assert [t.stop_reason for t in trajectories] == ["env_error", "env_error"]
    errors = _errors(trajectories)
    assert "code 7" in errors[0]
    assert "memory" in errors[1] and f"{MEMORY_MB} MB" in errors[1], errors[1]
    again = _run(contained, tokenizer, [["ok"], ["ok"]])  # the workers were replaced
    assert [t.stop_reason for t in again] == ["answered", "answered"]


@pytest.mark.parametrize("on_error", ["drop", "zero"])
def test_failed_episodes_leave_training_or_train_as_zero_as_env_on_error_says(on_error):
    turn = Turn(Completion(token_ids=[1], logprobs=[0.0], finish_reason="stop", text="x"))
    failed = Trajectory(prompt_index=0, prompt_ids=[1], turns=[turn], weight_version=0)
    fine = Trajectory(prompt_index=1, prompt_ids=[1], turns=[turn], weight_version=0)
    failed.stop_reason, fine.stop_reason = "env_error", "answered"
    for t in (failed, fine):
        parts = RewardParts(scores={"math_answer": 1.0}, functions=1.0)
        t.reward, t.reward_parts, t.correct = 1.0, parts, True
    zero_failed_episodes([failed, fine], on_error=on_error)
    zeroed = (failed.reward, failed.reward_parts.scores, failed.correct)
    assert zeroed == (0.0, {"math_answer": 0.0}, False)
    assert (failed.trains, fine.trains) == (on_error == "zero", True)
    assert (fine.reward, fine.correct) == (1.0, True)
    assert (failed.reward_parts.failure, fine.reward_parts.failure) == ("env_error", None)
