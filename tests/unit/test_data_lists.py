"""A data source written short: a path (`data.train=train.parquet`) or a list of files,
in recipes, overrides and from Python; a list loads in order, its files checked alike."""

from __future__ import annotations

import json
import logging
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from grouprl.config import ConfigError, load_config
from grouprl.config.convert import convert_verl
from grouprl.data.peek import source_problems
from grouprl.data.sources import DataError, load_rows, read_rows


@pytest.fixture
def files(tmp_path):
    """a.parquet (2 rows, the second broken) and b.jsonl (4 lines: two broken)."""
    rows = [{"question": "1+1", "answer": "2"}, {"question": "", "answer": "3"}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "a.parquet")
    lines = [
        {"question": "2+2", "answer": "4"},
        "not json",
        {"question": "3+3", "answer": None},
        {"question": "4+4", "answer": "8"},
    ]
    text = "\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines)
    (tmp_path / "b.jsonl").write_text(text + "\n")
    return tmp_path


def test_a_path_alone_is_the_source_in_overrides_recipes_and_python(tmp_path):
    cfg = load_config("tiny-arith", ["data.train=data/train.parquet", "data.eval=test.jsonl"])
    assert cfg.data.train.source == "data/train.parquet" and cfg.data.train.split == "train"
    assert cfg.data.eval.source == "test.jsonl" and cfg.data.eval.split == "test"
    recipe = tmp_path / "r.yaml"
    recipe.write_text("data:\n  train: data/train.parquet\n  eval: [a.parquet, b.jsonl]\n")
    cfg = load_config(str(recipe), ["data.train.limit=5"])  # a key below a short source
    assert (cfg.data.train.source, cfg.data.train.limit) == ("data/train.parquet", 5)
    assert cfg.data.eval.source == ["a.parquet", "b.jsonl"]
    cfg.data.train = "other.jsonl"  # from Python
    assert cfg.data.train.source == "other.jsonl"
    cfg.data.eval = ["x.parquet", "y.parquet"]
    assert cfg.data.eval.files == ["x.parquet", "y.parquet"]


def test_a_source_written_wrong_says_the_three_forms():
    with pytest.raises(ConfigError) as err:
        load_config("tiny-arith", ["data.train=5"])
    text = str(err.value)
    assert "data.train=data/train.parquet" in text and "{source: openai/gsm8k" in text
    assert "dictionary or instance" not in text
    with pytest.raises(ConfigError, match=r"local \.jsonl/\.json/\.parquet files only.*gsm8k"):
        load_config("tiny-arith", ["data.train=[a.parquet, openai/gsm8k]"])


def test_a_list_of_files_loads_in_order_and_skips_name_the_file(files, caplog):
    cfg = load_config("tiny-arith", [f"data.train=[{files}/a.parquet, {files}/b.jsonl]"])
    rows, report = read_rows(cfg.data.train, prompt_key="question", answer_key="answer")
    assert [r["question"] for r in rows] == ["1+1", "2+2", "4+4"]
    assert [r["_index"] for r in rows] == [0, 2, 5]  # counted across the files, unique
    assert [(s.file, s.index) for s in report.skipped] == [
        (f"{files}/a.parquet", 1),
        (f"{files}/b.jsonl", 1),
        (f"{files}/b.jsonl", 2),
    ]
    assert f"{files}/b.jsonl row 2: no answer" in report.summary()
    cfg.data.train.limit = 2  # the first 2 valid rows of the whole list
    with caplog.at_level(logging.WARNING):
        rows = load_rows(cfg.data.train, prompt_key="question", answer_key="answer")
    assert [r["question"] for r in rows] == ["1+1", "2+2"]
    assert "a.parquet row 1: prompt 'question' is empty" in caplog.text


def test_files_of_a_list_need_the_same_columns_at_load_and_before(files):
    (files / "c.jsonl").write_text(json.dumps({"prompt": "1+1", "answer": "2"}) + "\n")
    cfg = load_config("tiny-arith", [f"data.train=[{files}/a.parquet, {files}/c.jsonl]"])
    message = r"'.*c\.jsonl' has the columns \['answer', 'prompt'\].*missing: \['question'\]"
    with pytest.raises(DataError, match=message):
        read_rows(cfg.data.train, prompt_key="question", answer_key="answer")
    (problem,) = source_problems(cfg.data.train, config_key="data.train", data=cfg.data)
    assert "c.jsonl' has the columns ['answer', 'prompt']" in problem


def test_the_pre_run_check_opens_each_file_of_a_list(files):
    listed = f"[{files}/a.parquet, {files}/b.jsonl, {files}/gone.jsonl]"
    cfg = load_config("tiny-arith", [f"data.train={listed}"])
    (problem,) = source_problems(cfg.data.train, config_key="data.train", data=cfg.data)
    assert "file 2" in problem and "gone.jsonl" in problem and "file not found" in problem
    cfg = load_config("tiny-arith", [f"data.train=[{files}/a.parquet, {files}/b.jsonl]"])
    assert source_problems(cfg.data.train, config_key="data.train", data=cfg.data) == []
    cfg.data.prompt_key = "prompt"
    (problem,) = source_problems(cfg.data.train, config_key="data.train", data=cfg.data)
    assert "data.prompt_key='prompt' is not a column" in problem and "a.parquet + " in problem


def test_a_verl_list_of_train_files_converts_to_a_list():
    flat = {"data.train_files": ["a.parquet", "b.parquet"], "data.val_files": "t.parquet"}
    recipe = convert_verl(flat).recipe
    assert recipe["data"]["train"] == {"source": ["a.parquet", "b.parquet"]}
    assert recipe["data"]["eval"] == {"source": "t.parquet"}
