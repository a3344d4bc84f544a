"""Data problems found before anything loads (issue 37, items 15-17): rows without tests
code_tests reads, a file mixing the documented test formats, a set smaller than a batch,
prompts over data.max_prompt_tokens, and hints that point at the right key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grouprl.config import load_config
from grouprl.config.batch_checks import batch_problems
from grouprl.config.convert import convert_file
from grouprl.config.model_data import DataConfig, DataSource
from grouprl.data.peek import source_problems
from grouprl.data.prompt_lengths import prompt_lengths
from grouprl.data.sources import read_rows
from grouprl.driver.preflight import input_problems
from grouprl.rewards.code.tests_format import ROW_FIELDS

MIXED = [  # one row per documented code_tests format (docs/code.md)
    {"question": "a", "input_output": json.dumps({"inputs": ["2 3\n"], "outputs": ["5\n"]})},
    {
        "question": "b",
        "public_test_cases": json.dumps([{"input": "1", "output": "2", "testtype": "functional"}]),
        "private_test_cases": "[]",
        "metadata": json.dumps({"func_name": "inc"}),
    },
    {"question": "c", "verification_info": {"test_cases": [{"input": "a", "output": "a"}]}},
    {"question": "d", "tests": [{"input": "1\n", "output": "2\n", "testtype": "stdin"}]},
    {"question": "e", "tests": {"inputs": ["1\n"], "outputs": ["1\n"]}},
    {"question": "f", "test_code": "from solution import f\ndef test_f():\n    assert f(2) == 4\n"},
    {
        "question": "g",
        "test": "def check(candidate):\n    assert candidate(1) == 2\n",
        "entry_point": "g",
    },
    {"question": "h", "test_list": ["assert sq(2) == 4", "assert sq(3) == 9"]},
    {"question": "i", "test_list": ["assert f(x) == 1"], "test_setup_code": "x = 0"},
]
CODE = ["data.eval=null", "reward.functions=[{name: code_tests}]"]


def _jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_a_code_set_without_tests_is_refused_before_loading_naming_rows_columns_and_fix(tmp_path):
    rows = [{"prompt": f"write f{i}", "solution": "def f(): pass"} for i in range(20)]
    source = _jsonl(tmp_path / "rows.jsonl", rows)
    overrides = ["data.prompt_key=prompt", "data.answer_key=solution"]
    cfg = load_config("tiny-code", [f"data.train={source}", *CODE, *overrides])
    [problem] = input_problems(cfg)
    assert problem.startswith("data.train: reward code_tests runs each row's tests")
    assert "none of the 20 rows" in problem and "rows 0, 1, 2 and 17 more" in problem
    assert "['prompt', 'solution']" in problem and "input_output (APPS" in problem
    assert "Fix: set data.answer_key to the column holding the tests" in problem


def test_every_documented_code_format_in_one_file_is_kept(tmp_path):
    source = DataSource(source=_jsonl(tmp_path / "mixed.jsonl", MIXED))
    _kept, report = read_rows(source, prompt_key="question", answer_key="tests")
    assert (
        report.kept == 2
    )  # the issue's 2 of 9: without code_tests' fields, rows lacking the answer are broken
    _kept, report = read_rows(
        source, prompt_key="question", answer_key="tests", answer_fields=ROW_FIELDS
    )
    assert (report.kept, report.skipped) == (9, [])
    cfg = load_config("tiny-code", [f"data.train={source.source}", *CODE, "data.answer_key=x"])
    cfg.data.batch_size = 9
    cfg.train.mini_batch_size = cfg.train.micro_batch_size = 24
    assert input_problems(cfg) == []  # every row's tests read; answer_key need not exist


def test_a_train_set_smaller_than_a_batch_is_refused_with_the_numbers(tmp_path):
    source = _jsonl(tmp_path / "mixed.jsonl", MIXED)
    cfg = load_config("tiny-code", [f"data.train={source}", *CODE])
    [problem] = input_problems(cfg)
    assert "data.train has 9 usable prompts, fewer than data.batch_size=16" in problem
    assert "Fix: set data.batch_size=9 or less" in problem


def test_prompt_lengths_measured_without_transformers_match_the_real_tokenizer():
    from transformers import AutoTokenizer

    from grouprl.assets import resolve_model_path
    from grouprl.data.prompts import render_questions

    data = DataConfig(train="builtin:arith", system_prompt="Answer after ####.")
    rows, _ = read_rows(data.train, prompt_key="question", answer_key="answer", max_rows=40)
    for model in ("builtin:tiny-arith", "builtin:tiny-search"):
        path = Path(resolve_model_path(model))
        tokenizer = AutoTokenizer.from_pretrained(path)
        real = render_questions(
            tokenizer, rows, prompt_key="question", system_prompt=data.system_prompt,
            prompt_template=data.prompt_template,
        )  # fmt: skip
        assert prompt_lengths(path, rows, data=data).tokens == [len(ids) for ids in real]


def test_plan_refuses_when_every_prompt_is_too_long_naming_the_longest(tmp_path):
    cfg = load_config("tiny-arith", ["data.max_prompt_tokens=40", "data.eval=null"])
    [problem] = input_problems(cfg)
    assert "data.train: every prompt of the first 1,000 rows is longer than" in problem
    assert "data.max_prompt_tokens=40" in problem and "longest 59: row" in problem
    notes: list[str] = []
    cfg = load_config("tiny-arith", ["data.max_prompt_tokens=50", "data.eval=null"])
    assert input_problems(cfg, notes=notes) == []
    assert "longer, skipped by the run (keep them: data.max_prompt_tokens=59)" in notes[0]


def test_a_missing_key_is_hinted_with_the_column_of_its_role(tmp_path):
    source = DataSource(source=_jsonl(tmp_path / "r.jsonl", [{"prompt": "a", "solution": "b"}]))
    problems = source_problems(source, config_key="data.train", data=DataConfig())
    assert "Did you mean data.prompt_key=prompt?" in problems[0]
    assert "Did you mean data.answer_key=solution?" in problems[1]


def test_the_mini_batch_suggested_for_an_odd_batch_satisfies_the_rule_it_states():
    cfg = load_config("tiny-arith", ["data.batch_size=10"])
    [problem] = batch_problems(cfg)
    fix = "train.mini_batch_size=40 with train.micro_batch_size=20"
    assert fix in problem and "among the divisors" not in problem
    cfg = load_config(
        "tiny-arith",
        ["data.batch_size=10", "train.mini_batch_size=40", "train.micro_batch_size=20"],
    )
    assert batch_problems(cfg) == []


@pytest.mark.parametrize(
    ("override", "first"),
    [
        ("reward.functions=[{name: math_answr}]", "Did you mean 'math_answer'?"),
        ("reward.correct_function=math_answr", "Did you mean reward.correct_function=math_answer"),
    ],
)
def test_a_misspelt_reward_name_is_named_itself_never_offered_as_the_fix(override, first):
    from grouprl.config.checks import config_problems

    cfg = load_config("tiny-arith", [override, "data.eval=null"])
    assert config_problems(cfg) == []  # no follow-on problem from the config alone
    [problem] = input_problems(cfg)
    assert first in problem and "=math_answr" not in problem.split("Did you mean")[1]


def test_a_converted_verl_config_with_a_custom_reward_plans(tmp_path):
    (tmp_path / "my_reward.py").write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return float(solution_str.strip() == ground_truth)\n"
    )
    rows = [{"prompt": "1+1?", "reward_model": {"ground_truth": "2"}}] * 16
    _jsonl(tmp_path / "train.jsonl", rows)
    (tmp_path / "verl.yaml").write_text(
        f"data: {{train_files: {tmp_path}/train.jsonl, train_batch_size: 16}}\n"
        f"custom_reward_function: {{path: {tmp_path}/my_reward.py, name: compute_score}}\n"
        "trainer: {total_training_steps: 2}\n"
    )
    path, _ = convert_file(str(tmp_path / "verl.yaml"), out=str(tmp_path / "r.yaml"))
    cfg = load_config(str(path), ["model.path=builtin:tiny-arith"])
    assert cfg.reward.correct_function == f"{tmp_path}/my_reward.py:compute_score"
    assert [p for p in input_problems(cfg) if "correct_function" in p] == []
