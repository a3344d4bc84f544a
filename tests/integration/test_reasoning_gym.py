"""reasoning-gym tasks as a data source: rows keep their item's (task, size, seed, index),
the ``reasoning_gym`` reward rebuilds the entry in the reward workers and scores it with
the task's own scorer, a two-step run of the tiny model trains on one, and a bad task
name fails before anything loads."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import grouprl
from grouprl.cli import app
from grouprl.config.errors import ConfigError
from grouprl.config.model_data import DataSource
from grouprl.data.reasoning_gym import ROW_KEY
from grouprl.data.sources import read_rows
from grouprl.rewards.reasoning_gym import extract_answer, reasoning_gym_score

reasoning_gym = pytest.importorskip("reasoning_gym", reason="the graders extra (make install)")

TRAIN = "{source: reasoning_gym:chain_sum, size: 16, seed: 0}"
EVAL = "{source: reasoning_gym:chain_sum, size: 2, seed: 16}"


def _rows(size: int = 4, seed: int = 0) -> list[dict]:
    source = DataSource(source="reasoning_gym:chain_sum", size=size, seed=seed)
    rows, report = read_rows(source, prompt_key="question", answer_key="answer")
    assert report.kept == size and not report.skipped
    return rows


def test_rows_are_the_items_with_their_index_and_the_reward_is_the_tasks_scorer():
    rows = _rows()
    items = reasoning_gym.create_dataset("chain_sum", size=4, seed=0)
    for i, row in enumerate(rows):
        assert row["question"] == items[i]["question"] and row["answer"] == items[i]["answer"]
        assert row[ROW_KEY] == {"task": "chain_sum", "size": 4, "seed": 0, "index": i}
        assert row["_index"] == i
    row = rows[0]
    # by hand: the question's sum, worked out here, is the item's answer
    expression = row["question"].rsplit(":", 1)[1].rstrip("= ").strip()
    by_hand = str(eval(expression))  # digits and + - only: chain_sum's questions
    assert row["answer"] == by_hand
    assert reasoning_gym_score(f"I add them up.\n#### {by_hand}", row=row) == 1.0
    assert reasoning_gym_score(f"<answer>{by_hand}</answer>", row=row) == 1.0
    assert reasoning_gym_score(f"#### {int(by_hand) + 1}", row=row) == 0.0
    assert reasoning_gym_score(f"The answer is {by_hand}", row=row) == 0.0  # unmarked
    assert extract_answer("<answer> 12 </answer> then #### 3") == "12"  # tags first


def test_a_row_of_another_source_fails_the_call_saying_why():
    with pytest.raises(ValueError, match="reasoning_gym:<task> source"):
        reasoning_gym_score("#### 3", row={"question": "1 + 2", "answer": "3", "_index": 5})


def test_grouprl_tasks_lists_reasoning_gyms_registry_with_descriptions():
    result = CliRunner().invoke(app, ["tasks"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    names = [line.split()[0] for line in lines]
    assert names == sorted(reasoning_gym.factory.DATASETS)
    [chain_sum] = [line for line in lines if line.split()[0] == "chain_sum"]
    docstring = reasoning_gym.factory.DATASETS["chain_sum"][0].__doc__  # the dataset class's
    assert chain_sum.split(None, 1)[1] == docstring.strip().splitlines()[0]


def test_size_and_seed_belong_to_reasoning_gym_sources_only(tmp_path):
    with pytest.raises(ConfigError, match=r"size applies to a reasoning_gym:<task> source only"):
        _config(tmp_path, "data.eval={source: builtin:arith, size: 20}")


def _config(tmp_path, *extra: str):
    return grouprl.load_config(
        "tiny-arith",
        [
            "rollout.engine=hf",
            f"data.train={TRAIN}",
            f"data.eval={EVAL}",
            "reward.functions=[{name: reasoning_gym}]",
            "reward.correct_function=reasoning_gym",
            f"trainer.run_dir={tmp_path / 'run'}",
            *extra,
        ],
    )


def test_a_bad_task_name_fails_before_loading_with_the_close_names(tmp_path):
    with pytest.raises(ConfigError) as info:  # grouprl.load_config runs the checks
        _config(tmp_path, "data.train={source: reasoning_gym:chain_sums, size: 16}")
    text = str(info.value)
    assert "data.train.source='reasoning_gym:chain_sums': 'chain_sums' is not a" in text
    assert "Did you mean reasoning_gym:chain_sum" in text and "grouprl tasks" in text


def test_held_out_items_that_are_training_items_are_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"seeds 14 to 15 are in both.*data.eval.seed=16"):
        _config(tmp_path, "data.eval={source: reasoning_gym:chain_sum, size: 4, seed: 14}")


def test_two_steps_of_the_tiny_model_on_a_task_scored_by_its_scorer(tmp_path, tiny_model_dir):
    cfg = _config(
        tmp_path,
        f"model.path={tiny_model_dir}",
        "rollout.n=2",
        "rollout.max_tokens=16",
        "data.batch_size=2",
        "train.mini_batch_size=4",
        "train.micro_batch_size=4",
        "train.steps=2",
        # the first call in a worker imports reasoning-gym (~1.5 s idle, 8 s seen on two
        # cores shared with a busy suite): a deadline that a loaded machine cannot miss
        "reward.sandbox.timeout_s=60",
        "trainer.eval_before_train=false",  # validation at the end only
        "trainer.log_samples=4",
        "metrics.progress=false",
    )
    summary = grouprl.train(cfg)
    assert summary["finished"] and summary["step"] == 2
    run = tmp_path / "run"
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    steps = {x["step"]: x for x in lines if "reward/mean" in x}
    assert sorted(steps) == [1, 2]
    assert all(steps[s]["reward/errors"] == 0.0 for s in steps)
    assert any("eval/accuracy" in x for x in lines)  # data.eval's 2 items, scored alike
    samples = [json.loads(x) for x in (run / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 4  # each step's 2 prompts, the first sample of each
    items = reasoning_gym.create_dataset("chain_sum", size=16, seed=0)
    for sample in samples:  # each score is the task's scorer on the item, rebuilt here
        item = items[sample["prompt_index"]]
        assert item["question"] in sample["prompt"]
        expected = items.score_answer(extract_answer(sample["completion"]), item)
        assert sample["reward_parts"]["scores"]["reasoning_gym"] == expected, sample
