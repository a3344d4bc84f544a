"""Broken tool use never ends a run: garbage calls, unknown tools, wrong argument types
and hanging tools each come back to the model as an error observation and a metric.

The model's turns are scripted (an engine that replays given texts through the real
tokenizer), so each failure is produced on purpose."""

import time

import pytest
from transformers import AutoTokenizer

from grouprl.engines.base import SamplingSettings
from grouprl.envs.tool_env import ToolEnv
from grouprl.rollout.episodes import episode_metrics, run_episodes
from grouprl.tools.spec import ToolSet
from grouprl.types import Completion


def lookup(query: str) -> str:
    """Look a word up.

    Args:
        query: The word.
    """
    return f"{query} means something"


def count(n: int) -> str:
    """Count to n.

    Args:
        n: How far.
    """
    return " ".join(str(i) for i in range(1, n + 1))


def hang(x: str) -> str:
    """Never answers in time.

    Args:
        x: Anything.
    """
    time.sleep(5)
    return x


class ScriptedEngine:
    """Replays ``turns[k]`` as the model's k-th turn of every episode."""

    weight_version = 0

    def __init__(self, tokenizer, turns):
        self.tokenizer, self.turns, self.calls = tokenizer, turns, 0

    def generate(self, prompts, settings):
        text = self.turns[self.calls]
        self.calls += 1
        ids = [*self.tokenizer.encode(text, add_special_tokens=False), self.tokenizer.eos_token_id]
        completion = Completion(ids, [0.0] * len(ids), "stop", text=text)
        return [[completion] * settings.group_size for _ in prompts]


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


def _episode(tokenizer, fmt, first_turn):
    env = ToolEnv(
        ToolSet([lookup, count, hang]),
        tool_format=fmt,
        timeout_s=0.2,
        system_prompt="Use the tools.",
        prompt_key="question",
        answer_key="answer",
    )
    engine = ScriptedEngine(tokenizer, [first_turn, "<answer>done</answer>"])
    (traj,) = run_episodes(
        engine=engine,
        env=env,
        tokenizer=tokenizer,
        rows=[{"_index": 0, "question": "q", "answer": ["done"]}],
        settings=SamplingSettings(group_size=1, max_tokens=32),
        max_turns=3,
        max_model_len=1024,
    )
    return traj


@pytest.mark.parametrize(
    ("fmt", "first_turn", "error"),
    [
        ("xml", "<lookup><query>cats</query>", "unclosed"),  # garbage: never closed
        ("qwen", '<tool_call>{"name": "lookup", "arguments": {"query": </tool_call>', "JSON"),
        ("qwen", '<tool_call>{"name": "serch", "arguments": {}}</tool_call>', "unknown tool"),
        (
            "qwen",
            '<tool_call>{"name": "count", "arguments": {"n": "three"}}</tool_call>',
            "expects integer",
        ),
        ("xml", "<hang>x</hang>", "timed out"),
    ],
)
def test_a_broken_tool_call_becomes_an_error_observation(tokenizer, fmt, first_turn, error):
    t0 = time.perf_counter()
    traj = _episode(tokenizer, fmt, first_turn)
    assert time.perf_counter() - t0 < 3  # a hanging tool does not hold the episode
    assert traj.stop_reason == "answered" and len(traj.turns) == 2  # the episode went on
    assert traj.turns[0].info == {"tool_calls": 1, "tool_errors": 1}
    observation = tokenizer.decode(traj.turns[0].observation_ids)
    assert "Error:" in observation and error.lower() in observation.lower()
    metrics = episode_metrics([traj])
    assert metrics["episode/tool_error_rate"] == 1.0
    assert metrics["episode/stop/answered"] == 1.0


def test_a_good_call_returns_the_tool_result(tokenizer):
    traj = _episode(tokenizer, "xml", "<lookup>cats</lookup>")
    assert traj.turns[0].info == {"tool_calls": 1, "tool_errors": 0}
    assert "cats means something" in tokenizer.decode(traj.turns[0].observation_ids)


def test_a_turn_with_neither_call_nor_answer_is_a_parse_error(tokenizer):
    traj = _episode(tokenizer, "xml", "I think it is cats.")
    assert traj.stop_reason == "parse_error" and len(traj.turns) == 1
