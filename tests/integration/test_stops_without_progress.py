"""A run whose reward function, environment or agent goes down mid-run stops within the
failure brake's window, naming it, its last error and the fix, and summary.json says
why (issue 37): each works on its first calls, then fails every call. Tiny model,
transformers engine, 4 samples a step with a brake of 4: step 1 trains, step 2's calls
all fail and stop the run. The environment's run is asynchronous
(``rollout.max_staleness=1``): its error is raised on the stream's producer thread and
reaches the run from there. The window itself, the idle-step streak and summary.json's
record are unit-tested in tests/unit/test_failure_brake.py."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

import grouprl
from grouprl.rewards.failures import CannotTrain

HEALTHY_CALLS = 4
"""Calls (reward calls, episodes) that work before the outage: step 1's 4 samples."""

COUNTER = """
import os

def healthy(marks):
    '''Whether this is one of the first {healthy} calls, counted across worker processes.'''
    os.makedirs(marks, exist_ok=True)
    i = 0
    while True:
        try:
            os.close(os.open(os.path.join(marks, str(i)), os.O_CREAT | os.O_EXCL))
            return i < {healthy}
        except FileExistsError:
            i += 1
"""

GRADER = """
def grade(completion, *, reference, **kwargs):
    if healthy({marks!r}):
        return 1.0
    raise ConnectionError("judge at http://127.0.0.1:9/ refused the connection")
"""

ENV = """
from grouprl.envs import EnvContext, Step

class Tools:
    def __init__(self, *, ctx: EnvContext):
        self.ctx = ctx

    def episode(self, row):
        return Episode(self, row)

class Episode:
    def __init__(self, env, row):
        self.env, self.row = env, row

    def start(self):
        return self.env.ctx.prompt_messages(self.row)

    def step(self, model_text):
        if healthy({marks!r}):
            return Step(done=True)
        raise ConnectionError("tool server at http://127.0.0.1:9/ is down")
"""

AGENT = """
from openai import OpenAI

def solve(base_url, task, **kwargs):
    if not healthy({marks!r}):
        raise ConnectionError("the agent's search API at http://127.0.0.1:9/ is down")
    client = OpenAI(base_url=base_url, api_key="not-needed")
    messages = [{{"role": "user", "content": task["question"]}}]
    client.chat.completions.create(model="policy", messages=messages, max_tokens=8)
    return None
"""


def _code(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / f"{name}.py"
    marks = str(tmp_path / f"{name}-calls")
    path.write_text(
        COUNTER.format(healthy=HEALTHY_CALLS) + textwrap.dedent(body).format(marks=marks)
    )
    return path


def _run(tmp_path: Path, tiny_model_dir: str, *extra: str) -> tuple[CannotTrain, dict]:
    """Trains up to 4 steps of 4 samples; the error that stopped it, and its summary."""
    run_dir = tmp_path / "run"
    cfg = grouprl.load_config(
        "tiny-arith",
        [
            f"model.path={tiny_model_dir}",
            "rollout.engine=hf",
            "rollout.n=2",
            "rollout.max_tokens=8",
            "data.batch_size=2",
            "data.train.limit=16",
            "data.eval=null",
            "train.mini_batch_size=4",
            "train.micro_batch_size=4",
            "train.steps=4",
            "metrics.progress=false",
            f"trainer.run_dir={run_dir}",
            *extra,
        ],
    )
    with pytest.raises(CannotTrain) as err:
        grouprl.train(cfg)
    return err.value, json.loads((run_dir / "summary.json").read_text())


def _stopped_at_step_2(summary: dict, error: CannotTrain, kind: str) -> None:
    assert error.kind == kind and error.user_error  # the CLI: red, no traceback, exit 2
    assert summary["finished"] is False and summary["step"] <= 1
    assert summary["stopped"] == {"kind": kind, "step": summary["step"], "reason": str(error)}


def test_a_reward_function_that_goes_down_mid_run_stops_it_naming_the_function(
    tmp_path, tiny_model_dir
):
    grader = f"{_code(tmp_path, 'grader', GRADER)}:grade"
    error, summary = _run(
        tmp_path,
        tiny_model_dir,
        f"reward.functions=[{{name: math_answer}}, {{name: {grader}, weight: 0.1}}]",
        "reward.failure_brake=4",
    )
    _stopped_at_step_2(summary, error, "reward_failures")
    assert summary["step"] == 1  # step 1 trained on the grader's 1.0s
    message = str(error)
    assert f"reward function {grader!r} failed on its last 4 calls in a row" in message
    assert "ConnectionError: judge at http://127.0.0.1:9/ refused the connection" in message
    assert "raise reward.failure_brake" in message


def test_an_environment_that_goes_down_mid_run_stops_an_async_run_naming_it(
    tmp_path, tiny_model_dir
):
    env = f"{_code(tmp_path, 'tools', ENV)}:Tools"
    error, summary = _run(
        tmp_path,
        tiny_model_dir,
        f"env.name={env}",
        "env.sandbox.workers=1",
        "env.failure_brake=4",
        "rollout.max_staleness=1",
        "rollout.max_tokens=40",  # an episode cut at the length limit never calls step()
    )
    _stopped_at_step_2(summary, error, "env_failures")
    message = str(error)
    assert f"environment {env!r} failed its last 4 episodes in a row" in message
    assert "ConnectionError: tool server at http://127.0.0.1:9/ is down" in message
    assert "raise env.failure_brake" in message


def test_an_agent_that_goes_down_mid_run_stops_it_naming_the_agent(tmp_path, tiny_model_dir):
    agent = f"{_code(tmp_path, 'agent', AGENT)}:solve"
    error, summary = _run(
        tmp_path,
        tiny_model_dir,
        f"env.agent={agent}",
        "env.sandbox.workers=1",
        "env.failure_brake=4",
    )
    _stopped_at_step_2(summary, error, "agent_failures")
    assert summary["step"] == 1
    message = str(error)
    assert f"agent {agent!r} failed its last 4 episodes in a row" in message
    assert "ConnectionError: the agent's search API at http://127.0.0.1:9/ is down" in message
