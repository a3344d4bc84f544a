"""Multi-turn episodes on the tiny model with the transformers engine: the tokens the
trainer sees are the tokens the engine saw, turn by turn."""

from typing import ClassVar

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from grouprl.driver.batch import build_batch, turn_tensors
from grouprl.engines.base import SamplingSettings
from grouprl.engines.hf_engine import HFEngine
from grouprl.envs.base import Step
from grouprl.rollout.episodes import run_episodes


class ThreeTurns:
    """Replies with a tool message after turns 0 and 1 and ends after turn 2."""

    def __init__(self, row):
        self.row, self.turns = row, 0

    def start(self):
        return [{"role": "user", "content": self.row["question"]}]

    def step(self, model_text):
        self.turns += 1
        if self.turns == 3:
            return Step(messages=[], reward=0.0, done=True, stop_reason="answered")
        reply = {"role": "tool", "content": f"result {self.turns}: {model_text[:8]}"}
        return Step(messages=[reply], reward=0.5, info={"tool_calls": 1})


class ThreeTurnEnv:
    template_kwargs: ClassVar[dict] = {}

    def episode(self, row):
        return ThreeTurns(row)


class Recording:
    """The engine, keeping every context it was asked to continue."""

    def __init__(self, engine):
        self.engine, self.contexts = engine, []

    @property
    def weight_version(self):
        return self.engine.weight_version

    def generate(self, prompts, settings):
        groups = self.engine.generate(prompts, settings)
        for prompt, group in zip(prompts, groups, strict=True):
            self.contexts += [(list(prompt), c.token_ids) for c in group]
        return groups


@pytest.fixture(scope="module")
def episodes(tiny_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    engine = Recording(HFEngine(model, tokenizer, device="cpu"))
    rows = [{"_index": i, "question": f"What is {i} plus {i + 2}?"} for i in range(3)]
    trajectories = run_episodes(
        engine=engine,
        env=ThreeTurnEnv(),
        tokenizer=tokenizer,
        rows=rows,
        settings=SamplingSettings(group_size=2, temperature=1.0, max_tokens=48, seed=3),
        max_turns=4,
        max_model_len=1024,
    )
    return tokenizer, engine, trajectories


def test_trained_tokens_equal_what_the_engine_saw_turn_by_turn(episodes):
    tokenizer, engine, trajectories = episodes
    finished = [t for t in trajectories if t.stop_reason == "answered"]
    assert finished, [t.stop_reason for t in trajectories]
    batch = build_batch(trajectories, pad_id=tokenizer.pad_token_id)
    seen = {tuple(context + out) for context, out in engine.contexts}
    for b, traj in enumerate(trajectories):
        row_ids = batch.input_ids_BT[b][batch.attention_mask_BT[b].bool()].tolist()
        # every turn's context plus its output is a prefix of the trained row, as sent
        prefix = list(traj.prompt_ids)
        for turn in traj.turns:
            prefix += turn.completion.token_ids
            assert tuple(prefix) in seen
            assert row_ids[: len(prefix)] == prefix
            prefix += turn.observation_ids
        assert row_ids == prefix
        # the loss covers the model's tokens only; observations are rendered, not generated
        mask = batch.loss_mask_BT[b].bool()
        model_ids = [i for turn in traj.turns for i in turn.completion.token_ids]
        assert batch.input_ids_BT[b][mask].tolist() == model_ids
    three = [t for t in finished if len(t.turns) == 3]
    assert three, "no episode reached three turns"
    tool_text = tokenizer.decode(three[0].turns[0].observation_ids)
    assert tool_text.startswith("\n<|im_start|>tool\nresult 1:")
    assert tool_text.endswith("<|im_start|>assistant\n")


def test_turn_records_feed_the_multi_turn_estimators(episodes):
    _, _, trajectories = episodes
    rewards_BK, counts_B, credit_B = turn_tensors(trajectories)
    for b, traj in enumerate(trajectories):
        assert counts_B[b] == len(traj.turns)
        if traj.stop_reason == "answered" and len(traj.turns) == 3:
            assert rewards_BK[b].tolist()[:3] == [0.5, 0.5, 0.0]
            assert credit_B[b] == 1  # the first turn's tool call returned


def test_a_turn_cut_off_at_the_length_limit_ends_the_episode(tiny_model_dir, episodes):
    tokenizer, engine, _ = episodes
    trajectories = run_episodes(
        engine=engine,
        env=ThreeTurnEnv(),
        tokenizer=tokenizer,
        rows=[{"_index": 0, "question": "What is 1 plus 2?"}],
        settings=SamplingSettings(group_size=2, max_tokens=2, seed=1),
        max_turns=3,
        max_model_len=1024,
    )
    assert [t.stop_reason for t in trajectories] == ["max_tokens", "max_tokens"]
    assert all(len(t.turns) == 1 for t in trajectories)
