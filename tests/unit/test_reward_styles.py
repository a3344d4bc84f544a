"""verl's and TRL's reward functions run unmodified; a function no style can call, or one
defined in a notebook's ``__main__``, is refused before anything loads."""

from __future__ import annotations

import sys
import textwrap
import types

import pytest

import grouprl
from grouprl.config.containment import SandboxConfig
from grouprl.config.errors import ConfigError
from grouprl.config.reward import RewardConfig, RewardFunction
from grouprl.rewards import REWARD_FUNCTIONS, RewardScorer, register_reward, resolve_rewards
from grouprl.rewards.registry import reward_problems
from grouprl.sandbox import WorkerPool

# As verl's and TRL's docs write them: nothing here knows of grouprl.
FOREIGN = textwrap.dedent(
    """
    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        assert data_source == "openai/gsm8k" and extra_info["split"] == "train"
        right = solution_str.split("####")[-1].strip() == ground_truth
        return {"score": float(right), "acc": right}

    def compute_score_old(data_source, solution_str, ground_truth):  # before extra_info
        return 0.5

    def format_reward(completions, **kwargs):
        return [1.0 if c[0]["content"].startswith("<think>") else 0.0 for c in completions]

    def accuracy_reward(completions, solution, **kwargs):
        contents = [c[0]["content"] for c in completions]
        return [None if s is None else float(c == s) for c, s in zip(contents, solution)]

    def bad(text):
        return 1.0
    """
)


@pytest.fixture(scope="module")
def foreign(tmp_path_factory):
    path = tmp_path_factory.mktemp("foreign") / "foreign_rewards.py"
    path.write_text(FOREIGN)
    return path


@pytest.fixture(scope="module")
def pool():
    with WorkerPool(SandboxConfig(workers=1, memory_mb=1024), name="reward-styles-test") as shared:
        yield shared


def score(pool, entries, completions, rows, *, answer_key="answer", group_size=None):
    box = SandboxConfig(timeout_s=5.0)
    reward = RewardConfig(step_timeout_s=None, failure_brake=None, sandbox=box)
    scorer = RewardScorer(
        reward, answer_key=answer_key, functions=resolve_rewards(entries), pool=pool
    )
    return scorer(completions=completions, rows=rows, group_size=group_size)


@pytest.mark.procs
def test_verl_compute_score_runs_unmodified_per_completion(pool, foreign):
    rows = [
        {
            "prompt": "q",
            "data_source": "openai/gsm8k",
            "reward_model": {"ground_truth": "72"},
            "extra_info": {"split": "train", "index": i},
            "_index": i,
        }
        for i in range(2)
    ]
    entries = [
        RewardFunction(name=f"{foreign}:compute_score"),
        RewardFunction(name=f"{foreign}:compute_score_old", weight=2.0),
    ]
    assert [r.style for r in resolve_rewards(entries)] == ["verl", "verl"]
    scores = score(
        pool, entries, ["so #### 72", "#### 71"], rows, answer_key="reward_model.ground_truth"
    )
    assert scores.errors == []
    assert scores.parts == {entries[0].name: [1.0, 0.0], entries[1].name: [0.5, 0.5]}
    assert scores.total == [2.0, 1.0]


@pytest.mark.procs
def test_trl_batched_functions_run_unmodified_once_per_prompt_group(pool, foreign):
    conversation = [{"role": "user", "content": "2+2?"}]  # TRL's conversational prompts
    rows = [{"prompt": conversation, "solution": "4", "_index": 0}] * 2 + [
        {"prompt": conversation, "solution": None, "_index": 1}
    ] * 2
    entries = [
        RewardFunction(name=f"{foreign}:format_reward"),
        RewardFunction(name=f"{foreign}:accuracy_reward"),
    ]
    assert [r.style for r in resolve_rewards(entries)] == ["trl", "trl"]
    completions = ["<think>4", "4", "<think>x", "4"]
    scores = score(pool, entries, completions, rows, group_size=2)
    fmt, acc = (f.name for f in entries)
    assert scores.parts[fmt] == [1.0, 0.0, 1.0, 0.0]  # completions as messages: c[0]["content"]
    assert scores.parts[acc][:2] == [0.0, 1.0]  # solution: the dataset column, as a list
    # None is TRL's "not applicable": the function is left out of that sample's sum
    assert scores.parts[acc][2:] == [None, None]
    assert scores.errors == []
    assert scores.total == [1.0, 1.0, 1.0, 0.0]


def test_a_signature_no_style_can_call_is_refused_before_anything_loads(foreign):
    with pytest.raises(ConfigError) as err:
        grouprl.load_config("tiny-arith", [f"reward.functions=[{{name: {foreign}:bad}}]"])
    text = " ".join(str(err.value).split())
    assert f"reward.functions.0.name='{foreign}:bad': its parameters (text) fit no style" in text
    assert "verl `compute_score(data_source, solution_str, ground_truth" in text
    assert "trl `fn(completions, prompts=None, **kwargs)" in text
    assert "set reward.functions.0.style" in text
    # a declared style is checked against the parameters too
    declared = RewardFunction(name=f"{foreign}:compute_score", style="trl")
    [problem] = reward_problems([declared])
    assert problem.startswith("reward.functions.0.style='trl': ")
    assert "as trl it is called fn(completions=[...], prompts=[...], **columns)" in problem


def notebook_reward(completion, **kwargs):
    return 1.0


def test_a_function_defined_in_a_notebooks_main_is_refused_with_the_fix(monkeypatch):
    main = types.ModuleType("__main__")  # python -c, a notebook: nothing spawn can re-run
    main.notebook_reward = notebook_reward
    monkeypatch.setitem(sys.modules, "__main__", main)
    monkeypatch.setattr(notebook_reward, "__module__", "__main__")
    register_reward("test_notebook_reward", notebook_reward)
    try:
        [problem] = reward_problems([RewardFunction(name="test_notebook_reward")])
    finally:
        REWARD_FUNCTIONS.pop("test_notebook_reward")
    assert problem.startswith("reward.functions.0.name='test_notebook_reward': ")
    assert "defined in __main__ (a notebook or `python -c`)" in problem
    assert "{name: path/to/file.py:notebook_reward}" in problem
