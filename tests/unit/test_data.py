"""Data sources, prompt rendering and the resumable sampler."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from grouprl.config.model_data import DataConfig, DataSource
from grouprl.data.peek import source_problems
from grouprl.data.prompts import render_prompt, render_prompts, render_questions
from grouprl.data.sampler import PromptSampler
from grouprl.data.sources import DataError, get_field, load_rows, read_rows

ASSET_TOKENIZER = Path(__file__).parents[2] / "src" / "grouprl" / "assets" / "tiny-arith"
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def write_jsonl(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# --- sources -----------------------------------------------------------------------------


def test_builtin_arith_rows_keep_index_and_limit():
    rows = load_rows(
        DataSource(source="builtin:arith", split="test", limit=3),
        prompt_key="question",
        answer_key="answer",
    )
    assert [r["_index"] for r in rows] == [0, 1, 2]
    assert rows[0]["answer"].rsplit("\n", 1)[-1].startswith("#### ")
    assert rows[0]["question"].endswith("have now?")


def test_builtin_arith_long_is_arith_with_four_or_five_steps_in_fixed_disjoint_splits():
    """builtin:arith-long (the sparse task of benchmarks/distill.py): the same stories and
    answer format, twice the steps; its own seeds, the train split never holding a held-out
    question, and arith's splits unchanged by it."""
    from grouprl.assets.arith import arith_split
    from grouprl.assets.arith_long import arith_long_split

    rows = load_rows(
        DataSource(source="builtin:arith-long", split="test"),
        prompt_key="question",
        answer_key="answer",
    )
    assert len(rows) == 500
    assert {r["answer"].split("\n")[0].count(" = ") for r in rows} == {4, 5}
    assert all(r["answer"].rsplit("\n", 1)[-1].startswith("#### ") for r in rows)
    test = {p.question for p in arith_long_split("test")}
    assert test.isdisjoint(p.question for p in arith_long_split("train", size=5000))
    assert arith_long_split("test", size=3) == arith_long_split("test")[:3]
    # arith's first held-out problem, as it has been since its seed was fixed
    assert arith_split("test", size=1)[0].question.startswith("Ben has 14 books.")


def test_unknown_builtin_and_split_name_the_choices():
    with pytest.raises(DataError, match=r"builtin:arith") as err:
        load_rows(DataSource(source="builtin:nope"), prompt_key="question", answer_key="answer")
    assert err.value.user_error is True
    with pytest.raises(DataError, match=r"data.eval.split='dev'.*\['train', 'test'\]"):
        load_rows(
            DataSource(source="builtin:arith", split="dev"),
            prompt_key="question",
            answer_key="answer",
            config_key="data.eval",
        )


def test_jsonl_broken_lines_are_skipped_and_reported(tmp_path, caplog):
    path = write_jsonl(
        tmp_path / "rows.jsonl",
        [
            json.dumps({"question": "1+1?", "answer": "2"}),
            '{"question": "2+2?", "answer": ',  # bad JSON
            json.dumps({"prompt": "wrong column", "answer": "3"}),  # no question
            json.dumps({"question": None, "answer": "4"}),
            json.dumps({"question": 5, "answer": "5"}),
            json.dumps({"question": "3+3?", "answer": "6"}),
        ],
    )
    rows, report = read_rows(
        DataSource(source=str(path)), prompt_key="question", answer_key="answer"
    )
    assert [(r["question"], r["_index"]) for r in rows] == [("1+1?", 0), ("3+3?", 5)]
    assert [s.index for s in report.skipped] == [1, 2, 3, 4]
    assert "line 2 is not valid JSON" in report.skipped[0].reason
    assert "'question' missing" in report.skipped[1].reason
    assert "int, not text" in report.skipped[3].reason
    assert (report.total, report.kept) == (6, 2)

    with caplog.at_level(logging.WARNING, logger="grouprl.data.sources"):
        load_rows(DataSource(source=str(path)), prompt_key="question", answer_key="answer")
    assert "skipped 4 broken rows" in caplog.text
    assert "row 1: line 2 is not valid JSON" in caplog.text


def test_limit_counts_valid_rows(tmp_path):
    path = write_jsonl(
        tmp_path / "rows.jsonl",
        ["not json", *(json.dumps({"question": f"q{i}", "answer": str(i)}) for i in range(5))],
    )
    rows = load_rows(
        DataSource(source=str(path), limit=2), prompt_key="question", answer_key="answer"
    )
    assert [(r["question"], r["_index"]) for r in rows] == [("q0", 1), ("q1", 2)]


def test_all_rows_broken_raises(tmp_path):
    path = write_jsonl(tmp_path / "rows.jsonl", ["{bad", json.dumps({"question": "", "answer": 1})])
    with pytest.raises(DataError, match=r"every row .* is broken"):
        load_rows(DataSource(source=str(path)), prompt_key="question", answer_key="answer")


def test_missing_column_names_the_key_and_lists_columns(tmp_path):
    path = write_jsonl(tmp_path / "rows.jsonl", [json.dumps({"problem": "1+1?", "solution": "2"})])
    with pytest.raises(DataError) as err:
        load_rows(DataSource(source=str(path)), prompt_key="question", answer_key="solution")
    message = str(err.value)
    assert "data.prompt_key" in message
    assert "['problem', 'solution']" in message
    with pytest.raises(DataError, match=r"data.answer_key"):
        load_rows(DataSource(source=str(path)), prompt_key="problem", answer_key="answer")


def test_missing_file_says_where_it_looked(tmp_path):
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(DataError, match="file not found"):
        load_rows(DataSource(source=str(missing)), prompt_key="question", answer_key="answer")


def test_json_list_and_nested_keys(tmp_path):
    path = tmp_path / "rows.json"
    data = [{"q": {"text": "2*3?"}, "answer": {"value": 6}}, {"q": {"text": "1-1?"}}]
    path.write_text(json.dumps(data), encoding="utf-8")
    rows, report = read_rows(
        DataSource(source=str(path)), prompt_key="q.text", answer_key="answer.value"
    )
    assert len(rows) == 1 and get_field(rows[0], "answer.value") == 6
    assert report.skipped[0].index == 1 and "no answer" in report.skipped[0].reason


def test_json_that_is_not_a_list_is_rejected(tmp_path):
    path = tmp_path / "rows.json"
    path.write_text(json.dumps({"question": "x"}), encoding="utf-8")
    with pytest.raises(DataError, match="expected a list of objects"):
        load_rows(DataSource(source=str(path)), prompt_key="question", answer_key="answer")


def test_parquet_round_trip(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "rows.parquet"
    table = pa.table({"question": ["a?", None, "c?"], "answer": ["1", "2", "3"]})
    pq.write_table(table, path)
    rows, report = read_rows(
        DataSource(source=str(path)), prompt_key="question", answer_key="answer"
    )
    assert rows == [
        {"question": "a?", "answer": "1", "_index": 0},
        {"question": "c?", "answer": "3", "_index": 2},
    ]
    assert [s.index for s in report.skipped] == [1]


def test_local_saved_dataset_with_gsm8k_columns(tmp_path):
    import datasets

    train = datasets.Dataset.from_dict(
        {
            "question": ["Tom has 3 pens and buys 2. How many?", "Ann has 10 cards."],
            "answer": ["3 + 2 = <<3+2=5>>5\n#### 5", "#### 10"],
        }
    )
    test = datasets.Dataset.from_dict({"question": ["x?"], "answer": ["#### 1"]})
    datasets.DatasetDict({"train": train, "test": test}).save_to_disk(str(tmp_path / "gsm"))
    rows = load_rows(
        DataSource(source=str(tmp_path / "gsm"), split="train"),
        prompt_key="question",
        answer_key="answer",
    )
    assert [r["answer"] for r in rows] == ["3 + 2 = <<3+2=5>>5\n#### 5", "#### 10"]
    with pytest.raises(DataError, match=r"splits are \['train', 'test'\]"):
        load_rows(
            DataSource(source=str(tmp_path / "gsm"), split="validation"),
            prompt_key="question",
            answer_key="answer",
        )
    train.save_to_disk(str(tmp_path / "single"))
    rows = load_rows(
        DataSource(source=str(tmp_path / "single")), prompt_key="question", answer_key="answer"
    )
    assert [r["_index"] for r in rows] == [0, 1]


def test_unreachable_hub_dataset_is_a_data_error():
    with pytest.raises(DataError, match=r"data.train.subset"):
        load_rows(
            DataSource(source="grouprl-tests/no-such-dataset", subset="main"),
            prompt_key="question",
            answer_key="answer",
        )


# --- prompts -----------------------------------------------------------------------------


def byte_tokenizer(*, chat_template: str | None):
    """A byte-level tokenizer (one token per byte) with ChatML special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>")
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>"]})
    tok.chat_template = chat_template
    return tok


def test_render_prompt_uses_chat_template_and_returns_plain_ints():
    tok = byte_tokenizer(chat_template=CHAT_TEMPLATE)
    ids = render_prompt(
        tok,
        {"q": "What is 2+3?"},
        prompt_key="q",
        system_prompt="Be brief.",
        prompt_template="Solve: {question} Put it in \\boxed{}.",
    )
    assert type(ids) is list and all(type(t) is int for t in ids)
    expected = (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nSolve: What is 2+3? Put it in \\boxed{}.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert tok.decode(ids) == expected
    start = tok.convert_tokens_to_ids("<|im_start|>")
    assert ids[0] == start and ids.count(start) == 3
    # each chat marker is one token; every other byte is one token
    assert len(ids) == len(expected.encode()) - 3 * (len("<|im_start|>") - 1) - 2 * (
        len("<|im_end|>") - 1
    )


@pytest.mark.parametrize("system_prompt", [None, "Be brief."])
def test_prompts_rendered_in_batches_are_the_ones_rendered_one_by_one(system_prompt):
    tok = byte_tokenizer(chat_template=CHAT_TEMPLATE)
    rows = [{"q": "x" * n + " {y} é"} for n in range(7)]  # ragged, braces, non-ASCII
    kwargs = {"prompt_key": "q", "system_prompt": system_prompt, "prompt_template": "Q: {question}"}
    one_by_one = [render_prompt(tok, row, **kwargs) for row in rows]
    assert render_questions(tok, rows, chunk=3, **kwargs) == one_by_one


def test_render_prompt_without_chat_template_falls_back_to_plain_text():
    tok = byte_tokenizer(chat_template=None)
    with pytest.warns(UserWarning, match="no chat template"):
        ids = render_prompt(
            tok,
            {"question": "1+1?"},
            prompt_key="question",
            system_prompt="Sys.",
            prompt_template="Q: {question}",
        )
    assert tok.decode(ids) == "Sys.\n\nQ: 1+1?"


def test_prompt_template_without_placeholder_is_rejected():
    tok = byte_tokenizer(chat_template=CHAT_TEMPLATE)
    with pytest.raises(DataError, match=r"data.prompt_template"):
        render_prompt(
            tok,
            {"question": "x"},
            prompt_key="question",
            system_prompt=None,
            prompt_template="no placeholder",
        )


def test_render_prompts_drops_long_rows_and_reports_indices(caplog):
    tok = byte_tokenizer(chat_template=CHAT_TEMPLATE)
    rows = [
        {"question": "short", "_index": 10},
        {"question": "x" * 200, "_index": 11},
        {"question": "tiny", "_index": 12},
    ]
    # tokens: "<|im_start|>user\n" 1 + 5, content, "<|im_end|>\n" 2, "<|im_start|>assistant\n" 11
    cfg = DataConfig(max_prompt_tokens=6 + 5 + 2 + 11)
    with caplog.at_level(logging.WARNING, logger="grouprl.data.prompts"):
        ids, kept = render_prompts(tok, rows, data_cfg=cfg)
    assert [r["_index"] for r in kept] == [10, 12]
    assert [len(x) for x in ids] == [24, 23]
    assert "skipped 1 of 3 prompts" in caplog.text and "row 11 (219 tokens)" in caplog.text
    with pytest.raises(DataError, match="at least 219"):
        render_prompts(tok, rows[1:2], data_cfg=cfg)


def test_render_prompt_with_shipped_tokenizer():
    if not (ASSET_TOKENIZER / "tokenizer_config.json").is_file():
        pytest.skip(f"shipped tokenizer not built yet at {ASSET_TOKENIZER}")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(ASSET_TOKENIZER))
    row = {"question": "Mia has 7 shells. How many shells does Mia have now?"}
    ids = render_prompt(
        tok, row, prompt_key="question", system_prompt=None, prompt_template="{question}"
    )
    messages = [{"role": "user", "content": row["question"]}]
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert type(ids) is list and all(type(t) is int for t in ids)
    assert ids == tok(text, add_special_tokens=False)["input_ids"]
    assert row["question"] in tok.decode(ids)


# --- sampler -----------------------------------------------------------------------------


def test_sampler_visits_every_row_once_per_epoch_across_batch_boundaries():
    sampler = PromptSampler(5, seed=3)
    batches = [sampler.next_batch(3) for _ in range(5)]  # 15 positions = 3 epochs
    flat = [i for b in batches for i in b]
    epochs = [flat[0:5], flat[5:10], flat[10:15]]
    assert all(sorted(e) == [0, 1, 2, 3, 4] for e in epochs)
    assert epochs[0] != epochs[1]  # reshuffled (fixed seed: these two orders differ)
    assert sampler.epoch == 3
    assert PromptSampler(5, seed=3).next_batch(15) == flat  # batch size does not change order


def test_sampler_without_shuffle_is_in_order():
    sampler = PromptSampler(4, seed=0, shuffle=False)
    assert [sampler.next_batch(3) for _ in range(3)] == [[0, 1, 2], [3, 0, 1], [2, 3, 0]]
    assert sampler.epoch == 2


def test_sampler_resume_matches_uninterrupted():
    straight = PromptSampler(7, seed=11)
    expected = [straight.next_batch(3) for _ in range(8)]

    first = PromptSampler(7, seed=11)
    head = [first.next_batch(3) for _ in range(4)]  # stops mid-epoch (12 = 7 + 5)
    state = json.loads(json.dumps(first.state_dict()))  # survives a JSON checkpoint
    assert state["epoch"] == 1 and state["position"] == 5

    resumed = PromptSampler(7, seed=11)
    resumed.load_state_dict(state)
    assert head + [resumed.next_batch(3) for _ in range(4)] == expected
    assert resumed.epoch == straight.epoch


def test_sampler_refuses_state_from_other_data():
    state = PromptSampler(7, seed=11).state_dict()
    with pytest.raises(DataError, match="num_rows=7 but this run has num_rows=8"):
        PromptSampler(8, seed=11).load_state_dict(state)


# --- chat-message prompts (verl and TRL rows) ------------------------------------------


def template_ids(tok, messages: list[dict]) -> list[int]:
    """What the tokenizer's chat template makes of ``messages``, generation prompt included."""
    return tok.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )


MESSAGES = [
    {"role": "system", "content": "Answer after ####."},
    {"role": "user", "content": "Tom has 3 pens and buys 2. How many?"},
]


def test_message_prompts_render_to_the_chat_templates_ids():
    tok = byte_tokenizer(chat_template=CHAT_TEMPLATE)
    system = "Used only where the row has no system message."
    kwargs = {"prompt_key": "prompt", "system_prompt": system, "prompt_template": "{question}"}
    rows = [{"prompt": MESSAGES}, {"prompt": MESSAGES[1:]}, {"prompt": "Plain text?"}]
    ids = render_questions(tok, rows, **kwargs)
    sys_message = {"role": "system", "content": system}
    assert ids == [
        template_ids(tok, MESSAGES),  # its own system message wins
        template_ids(tok, [sys_message, MESSAGES[1]]),
        template_ids(tok, [sys_message, {"role": "user", "content": "Plain text?"}]),
    ]
    assert [render_prompt(tok, row, **kwargs) for row in rows] == ids
    assert "Answer after ####." in tok.decode(ids[0]) and system not in tok.decode(ids[0])


def test_a_prompt_template_with_message_prompts_is_refused():
    tok = byte_tokenizer(chat_template=CHAT_TEMPLATE)
    row = {"prompt": MESSAGES, "_index": 7}
    with pytest.raises(DataError, match=r"data.prompt_template='Q: \{question\}'.*row 7"):
        render_prompt(
            tok, row, prompt_key="prompt", system_prompt=None, prompt_template="Q: {question}"
        )
    with pytest.raises(DataError, match="no chat template"):
        render_prompt(
            byte_tokenizer(chat_template=None),
            row,
            prompt_key="prompt",
            system_prompt=None,
            prompt_template="{question}",
        )


def test_broken_message_rows_are_skipped_and_reported_with_their_index(tmp_path):
    user = {"role": "user", "content": "1+1?"}
    prompts = [
        [user],  # 0: fine
        [],  # 1: empty
        [{"role": "tool", "content": "x"}, user],  # 2: unknown role
        [{"role": "user", "content": 5}],  # 3: content not a string
        ["1+1?"],  # 4: not a message object
        [{"role": "system", "content": "be brief"}],  # 5: no user message
        "2+2?",  # 6: plain text, fine
        [{"role": "user"}],  # 7: no content
    ]
    path = write_jsonl(
        tmp_path / "rows.jsonl", [json.dumps({"prompt": p, "answer": "2"}) for p in prompts]
    )
    rows, report = read_rows(DataSource(source=str(path)), prompt_key="prompt", answer_key="answer")
    assert [r["_index"] for r in rows] == [0, 6]
    reasons = {s.index: s.reason for s in report.skipped}
    assert list(reasons) == [1, 2, 3, 4, 5, 7]
    assert "empty list of messages" in reasons[1]
    assert "role 'tool'" in reasons[2] and "system, user, assistant" in reasons[2]
    assert "message 0 (user) has content of type int" in reasons[3]
    assert "message 0 is str" in reasons[4]
    assert "no user message" in reasons[5]
    assert "content of type NoneType" in reasons[7]
    assert "row 2: prompt 'prompt' message 0 has role 'tool'" in report.summary()


def _verl_rows(n: int) -> list[dict]:
    """verl's parquet rows (examples/data_preprocess/gsm8k.py's columns) for builtin:arith."""
    from grouprl.assets.arith import builtin_rows

    rows, _ = builtin_rows("train", n)
    return [
        {
            "data_source": "builtin:arith",
            "prompt": [{"role": "user", "content": r["question"]}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": r["answer"].rsplit("#### ", 1)[1]},
            "extra_info": {"split": "train", "index": i},
        }
        for i, r in enumerate(rows)
    ]


def test_verl_parquet_struct_columns_load_as_nested_dicts(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = _verl_rows(3)
    rows[1]["prompt"] = [{"role": "user", "content": rows[1]["prompt"][0]["content"], "name": "u"}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "verl.parquet")
    loaded, report = read_rows(
        DataSource(source=str(tmp_path / "verl.parquet")),
        prompt_key="prompt",
        answer_key="reward_model.ground_truth",
    )
    assert not report.skipped
    assert [get_field(r, "reward_model.ground_truth") for r in loaded] == [
        r["reward_model"]["ground_truth"] for r in rows
    ]
    # the struct column gives every message every field: the ones a row lacks are null,
    # and do not reach the chat template
    assert loaded[0]["prompt"] == [
        {"role": "user", "content": rows[0]["prompt"][0]["content"], "name": None}
    ]
    tok = byte_tokenizer(chat_template=CHAT_TEMPLATE)
    ids = render_questions(
        tok, loaded, prompt_key="prompt", system_prompt=None, prompt_template="{question}"
    )
    assert ids == [template_ids(tok, row["prompt"]) for row in rows]


# --- checks before loading (data.peek) ----------------------------------------------------


def _problems(source: str, **data) -> list[str]:
    return source_problems(
        DataSource(source=source), config_key="data.train", data=DataConfig(**data)
    )


def test_peek_reads_a_parquet_schema_and_dotted_struct_keys(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "verl.parquet"
    pq.write_table(pa.Table.from_pylist(_verl_rows(2)), path)
    good = {"prompt_key": "prompt", "answer_key": "reward_model.ground_truth"}
    assert _problems(str(path), **good) == []
    [problem] = _problems(str(path), prompt_key="prompt", answer_key="reward_model.groundtruth")
    assert problem.startswith("data.answer_key='reward_model.groundtruth' is not a column of ")
    assert "column 'reward_model' has the fields ['ground_truth', 'style']" in problem
    assert "Did you mean data.answer_key=reward_model.ground_truth?" in problem
    [problem] = _problems(str(path), **good, prompt_template="Q: {question}")
    assert "data.prompt_template='Q: {question}'" in problem and "chat messages" in problem


def test_peek_names_the_key_for_a_missing_file_column_or_bad_json(tmp_path):
    path = write_jsonl(tmp_path / "rows.jsonl", [json.dumps({"problem": "1+1?", "solution": "2"})])
    [problem] = _problems(str(path), prompt_key="problem", answer_key="answer")
    assert f"data.answer_key='answer' is not a column of data.train.source='{path}'" in problem
    assert "['problem', 'solution']" in problem
    assert len(_problems(str(path))) == 2  # question and answer both missing
    [missing] = _problems(str(tmp_path / "nope.parquet"))
    assert missing.startswith("data.train.source=") and "file not found" in missing
    assert (
        source_problems(
            DataSource(source=str(tmp_path / "nope.parquet")),
            config_key="data.train",
            data=DataConfig(),
            missing_ok=True,
        )
        == []
    )
    bad = write_jsonl(tmp_path / "bad.jsonl", ["not json", "[1, 2]"])
    [problem] = _problems(str(bad))
    assert "is not JSON lines" in problem
    (tmp_path / "bad.parquet").write_text("not parquet")
    [problem] = _problems(str(tmp_path / "bad.parquet"))
    assert "is not a readable parquet file" in problem
    assert _problems("openai/gsm8k") == []  # a hub name cannot be checked offline
    assert _problems("builtin:arith", prompt_key="prompt")[0].startswith(
        "data.prompt_key='prompt' is not a column of data.train.source='builtin:arith'"
    )
