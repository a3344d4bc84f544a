"""A user environment runs in worker processes: a step that hangs, raises, exits the
process or returns the wrong type ends only its episode (``env_error``, reward 0,
counted and logged with the sample and prompt index); the other episodes go on."""

import logging
import textwrap
import time

import pytest
from transformers import AutoTokenizer

from grouprl.config.schema import DataConfig, EnvConfig
from grouprl.engines.base import SamplingSettings
from grouprl.envs.factory import make_env
from grouprl.rollout.episodes import episode_metrics, run_episodes
from grouprl.rollout.setup import zero_failed_episodes
from grouprl.types import Completion, RewardParts, Trajectory, Turn

MEMORY_MB = 512

ENV = textwrap.dedent(
    """
    import os, time
    from grouprl.envs import Step

    class Modes:
        def __init__(self, *, ok_reward: float = 0.5):
            self.ok_reward = ok_reward

        def episode(self, row):
            return Episode(self, row)

    class Episode:
        def __init__(self, env, row):
            self.env, self.row = env, row

        def start(self):
            return [{"role": "user", "content": self.row["question"]}]

        def step(self, text):
            if text == "sleep":
                time.sleep(60)
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
            return Step(reward=self.env.ok_reward, done=True)
    """
)


class Scripted:
    """An engine that answers row i with ``row["mode"]``."""

    weight_version = 0

    def generate(self, prompts, settings):
        return [
            [Completion(token_ids=[5], logprobs=[0.0], finish_reason="stop", text=m)]
            for m in self.modes[: len(prompts)]
        ]


@pytest.fixture(scope="module")
def contained(tmp_path_factory, tiny_model_dir):
    tmp = tmp_path_factory.mktemp("env")
    (tmp / "modes.py").write_text(ENV)
    cfg = EnvConfig(
        name=f"{tmp / 'modes.py'}:Modes", step_timeout_s=2.0, workers=2, memory_mb=MEMORY_MB
    )
    env = make_env(cfg, DataConfig(), cache_dir=tmp)
    yield env, AutoTokenizer.from_pretrained(tiny_model_dir)
    env.close()


def _run(env, tokenizer, modes):
    engine = Scripted()
    engine.modes = modes
    rows = [{"_index": 10 + i, "question": "q"} for i in range(len(modes))]
    return run_episodes(
        engine=engine,
        env=env,
        tokenizer=tokenizer,
        rows=rows,
        prompts=[[1, 2, 3]] * len(rows),
        settings=SamplingSettings(group_size=1, max_tokens=8),
        max_turns=2,
        max_model_len=64,
    )


def test_a_hanging_or_raising_step_ends_only_its_episode(contained, caplog):
    env, tokenizer = contained
    # episode i runs on worker i % 2: worker 1 is killed at the sleep's deadline, and the
    # episodes it held (3, 5) are lost with it; worker 0 lives on through the errors
    modes = ["ok", "sleep", "raise", "ok", "wrong", "ok", "ok"]
    started = time.perf_counter()
    with caplog.at_level(logging.WARNING, logger="grouprl.rollout.episodes"):
        trajectories = _run(env, tokenizer, modes)
    assert time.perf_counter() - started < 20  # the sleep(60) was not waited for
    stops = [t.stop_reason for t in trajectories]
    assert stops == ["answered"] + ["env_error"] * 5 + ["answered"]
    info = [t.turns[0].info.get("env_error", "") for t in trajectories]
    assert "timed out" in info[1] and "2s deadline" in info[1]
    assert "ValueError: bad step" in info[2]
    assert "not a grouprl.envs.Step" in info[4]
    assert "lost the episode's state" in info[3] and "lost the episode's state" in info[5]
    assert trajectories[0].turns[0].reward == 0.5  # env.args default reached the worker
    assert "sample 1 (prompt index 11)" in caplog.text
    assert episode_metrics(trajectories)["episode/env_errors"] == sum(
        s == "env_error" for s in stops
    )


def test_a_step_that_exits_or_runs_out_of_memory_ends_its_episode_and_the_next_runs(contained):
    env, tokenizer = contained
    trajectories = _run(env, tokenizer, ["exit", "allocate"])
    assert [t.stop_reason for t in trajectories] == ["env_error", "env_error"]
    errors = [t.turns[0].info["env_error"] for t in trajectories]
    assert "code 7" in errors[0]
    assert f"MemoryError: address space limit {MEMORY_MB} MB" in errors[1], errors[1]
    again = _run(env, tokenizer, ["ok", "ok"])  # the workers were replaced
    assert [t.stop_reason for t in again] == ["answered", "answered"]


def test_failed_episodes_score_zero():
    turn = Turn(Completion(token_ids=[1], logprobs=[0.0], finish_reason="stop", text="x"))
    failed = Trajectory(prompt_index=0, prompt_ids=[1], turns=[turn], weight_version=0)
    fine = Trajectory(prompt_index=1, prompt_ids=[1], turns=[turn], weight_version=0)
    failed.stop_reason, fine.stop_reason = "env_error", "answered"
    for t in (failed, fine):
        parts = RewardParts(scores={"math_answer": 1.0}, functions=1.0)
        t.reward, t.reward_parts, t.correct = 1.0, parts, True
    zero_failed_episodes([failed, fine])
    zeroed = (failed.reward, failed.reward_parts.scores, failed.correct)
    assert zeroed == (0.0, {"math_answer": 0.0}, False)
    assert (fine.reward, fine.correct) == (1.0, True)
    assert (failed.reward_parts.failure, fine.reward_parts.failure) == ("env_error", None)
