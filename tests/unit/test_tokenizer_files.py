"""assets/tokenizers: two models' tokenizers compared from their files, nothing loaded."""

import json
import shutil

from grouprl.assets import ASSETS_DIR
from grouprl.assets.tokenizers import end_token_ids, vocab_difference


def _copy(tmp_path, name="copy"):
    out = tmp_path / name
    shutil.copytree(ASSETS_DIR / "tiny-arith", out, ignore=shutil.ignore_patterns("*.safetensors"))
    return out


def _edit(path, change):
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_the_same_vocabulary_is_no_difference(tmp_path):
    copy = _copy(tmp_path)
    assert vocab_difference("builtin:tiny-arith", str(copy)) is None
    assert vocab_difference("builtin:tiny-arith", "builtin:tiny-arith-rm") is None


def test_a_token_with_another_id_is_named(tmp_path):
    copy = _copy(tmp_path)
    vocab = json.loads((copy / "tokenizer.json").read_text())["model"]["vocab"]
    a, b = list(vocab)[5:7]

    def swap(data):
        v = data["model"]["vocab"]
        v[a], v[b] = v[b], v[a]

    _edit(copy / "tokenizer.json", swap)
    assert vocab_difference("builtin:tiny-arith", str(copy)) == (
        f"{a!r} is token {vocab[a]} in one and {vocab[b]} in the other"
    )


def test_another_size_and_other_merges_are_named(tmp_path):
    assert vocab_difference("builtin:tiny-arith", "builtin:tiny-code") == (
        "one has 397 tokens, the other 596"
    )
    copy = _copy(tmp_path)
    _edit(copy / "tokenizer.json", lambda d: d["model"]["merges"].reverse())
    assert "merges differ" in (vocab_difference("builtin:tiny-arith", str(copy)) or "")


def test_a_hub_name_cannot_be_told_here():
    assert vocab_difference("builtin:tiny-arith", "Qwen/Qwen2.5-0.5B-Instruct") is None
    assert end_token_ids("Qwen/Qwen2.5-0.5B-Instruct") is None


def test_end_tokens_from_both_files(tmp_path):
    assert end_token_ids("builtin:tiny-arith") == {2}  # <|im_end|> in both files
    copy = _copy(tmp_path)
    _edit(copy / "generation_config.json", lambda d: d.update(eos_token_id=[0, 2]))
    assert end_token_ids(str(copy)) == {0, 2}
    _edit(copy / "tokenizer_config.json", lambda d: d.update(eos_token="<|endoftext|>"))
    _edit(copy / "generation_config.json", lambda d: d.pop("eos_token_id"))
    assert end_token_ids(str(copy)) == {0}
