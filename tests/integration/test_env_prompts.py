"""An environment's episodes open with the data section's prompt keys, and the prompt set
holds (and filters by ``data.max_prompt_tokens``) exactly the ids the engine receives."""

import pytest
from transformers import AutoTokenizer

from grouprl.config.env import EnvConfig
from grouprl.config.model_data import DataConfig, DataSource
from grouprl.data.prompts import chat_prompt_ids, render_prompt
from grouprl.envs.factory import make_env
from grouprl.envs.tool_env import SYSTEM_PROMPTS
from grouprl.rollout.setup import load_prompt_set

FICTIONAL = DataSource(source="builtin:fictional", split="test", limit=20)


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")  # the built-in corpus's index, built once


def test_episodes_open_with_data_system_prompt_and_template(cache):
    data = DataConfig(system_prompt="Be brief.", prompt_template="Q: {question}\nA:")
    env = make_env(EnvConfig(name="search_qa"), data, cache_dir=cache)
    assert env.episode({"question": "Who?"}).start() == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Q: Who?\nA:"},
    ]
    default = make_env(
        EnvConfig(name="search_qa", tool_format="qwen"), DataConfig(), cache_dir=cache
    )
    assert default.episode({"question": "Who?"}).start() == [
        {"role": "system", "content": SYSTEM_PROMPTS["qwen"]},
        {"role": "user", "content": "Who?"},
    ]


def test_episodes_open_with_a_rows_chat_messages_as_given(cache):
    env = make_env(EnvConfig(name="search_qa"), DataConfig(prompt_key="prompt"), cache_dir=cache)
    user = {"role": "user", "content": "Who?"}
    assert env.episode({"prompt": [user]}).start() == [
        {"role": "system", "content": SYSTEM_PROMPTS["xml"]},
        user,
    ]
    own = [{"role": "system", "content": "Search first."}, user]
    assert env.episode({"prompt": own}).start() == own


def test_prompt_set_holds_the_env_prompt_and_filters_by_its_length(tokenizer, cache):
    data = DataConfig(max_prompt_tokens=1024)
    env = make_env(EnvConfig(name="search_qa"), data, cache_dir=cache)
    full = load_prompt_set(FICTIONAL, tokenizer=tokenizer, data=data, config_key="x", env=env)
    for ids, row in zip(full.prompts, full.rows, strict=True):
        assert ids == chat_prompt_ids(tokenizer, env.episode(row).start())
        plain = render_prompt(
            tokenizer, row, prompt_key="question", system_prompt=None, prompt_template="{question}"
        )
        assert len(ids) > len(plain)  # the env's system prompt is counted
    lengths = sorted(len(ids) for ids in full.prompts)
    data.max_prompt_tokens = lengths[len(lengths) // 2]  # keeps about half
    cut = load_prompt_set(FICTIONAL, tokenizer=tokenizer, data=data, config_key="x", env=env)
    assert len(cut) == sum(n <= data.max_prompt_tokens for n in lengths) < len(full)
    assert all(len(ids) <= data.max_prompt_tokens for ids in cut.prompts)
