"""The agent gateway against a scripted engine: token-exact records, batching, tool calls,
history rewrites, OpenAI-shaped errors, the reward call, and agent rollouts."""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request

import pytest
from openai import OpenAI

from grouprl.config.schema import RunConfig
from grouprl.data.prompts import chat_prompt_ids
from grouprl.engines.base import SamplingSettings
from grouprl.engines.segments import GenerationAborted
from grouprl.envs.base import render_observation
from grouprl.rewards.scoring import RewardScores
from grouprl.rollout.gateway.agents import AgentRollout
from grouprl.rollout.gateway.record import gateway_metrics
from grouprl.rollout.gateway.server import Gateway
from grouprl.tools.wire import assistant_reply, request_tools
from grouprl.types import Completion

ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Adds two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}


def call(name: str, arguments) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


class ScriptedEngine:
    """Answers each context with ``reply(context)``; token ids 200, 201, ... per call (and
    EOS), cut at the context's max_tokens; logprobs -0.1 * position: fixed values a test
    can look for."""

    weight_version = 7

    def __init__(self, tokenizer, reply=lambda context: "4") -> None:
        self.eos = tokenizer.convert_tokens_to_ids(tokenizer.eos_token)
        self.reply, self.batches, self.next_id = reply, [], 200
        self.lock = threading.Lock()

    def generate(self, prompts, settings):
        with self.lock:
            self.batches.append(([list(p) for p in prompts], settings))
            out = []
            for prompt, limit in zip(
                prompts, settings.prompt_max_tokens(len(prompts)), strict=True
            ):
                ids = [self.next_id, self.next_id + 1, self.eos][:limit]
                self.next_id += 2
                lps = [-0.1 * (k + 1) for k in range(len(ids))]
                finish = "stop" if ids[-1] == self.eos else "length"
                out.append([Completion(ids, lps, finish, self.reply(prompt))])
            return out


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def serve(engine, tokenizer, **kwargs) -> Gateway:
    settings = SamplingSettings(
        group_size=1, temperature=0.7, max_tokens=kwargs.pop("max_tokens", 32)
    )
    return Gateway(
        engine=engine,
        tokenizer=tokenizer,
        settings=settings,
        max_model_len=kwargs.pop("max_model_len", 512),
        max_turns=kwargs.pop("max_turns", 4),
        **kwargs,
    )


def post(url: str, body, headers=None) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers=headers or {}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_a_two_turn_conversation_is_recorded_token_exactly(tokenizer):
    engine = ScriptedEngine(tokenizer, reply=lambda c: call("add", {"a": 2, "b": 2}))
    gateway = serve(engine, tokenizer)
    with gateway.serving():
        key = gateway.open(index=0, row={"_index": 5, "question": "2+2"})
        client = OpenAI(base_url=gateway.base_url(key), api_key="unused")
        messages = [{"role": "user", "content": "What is 2+2?"}]
        first = client.chat.completions.create(model="m", messages=messages, tools=[ADD])
        reply = first.choices[0].message
        assert first.choices[0].finish_reason == "tool_calls"
        assert json.loads(reply.tool_calls[0].function.arguments) == {"a": 2, "b": 2}
        tool = {"role": "tool", "tool_call_id": reply.tool_calls[0].id, "content": "4"}
        messages += [reply.model_dump(exclude_none=True), tool]
        client.chat.completions.create(model="m", messages=messages, tools=[ADD])
    record = gateway.episodes[key]
    traj = record.trajectory(fallback_prompt=[])
    prompt = chat_prompt_ids(tokenizer, messages[:1], tools=[ADD])
    observation = render_observation(tokenizer, [tool], tools=[ADD])
    assert traj.prompt_ids == prompt
    assert [t.completion.token_ids for t in traj.turns] == [
        [200, 201, engine.eos],
        [202, 203, engine.eos],
    ]
    assert traj.turns[0].observation_ids == observation
    assert traj.turns[1].completion.logprobs == pytest.approx([-0.1, -0.2, -0.3])
    # the second call's context is exactly prompt + turn 0 + observation
    assert record.calls[1].prompt_ids == [*prompt, 200, 201, engine.eos, *observation]
    assert traj.sequence_ids() == [*record.calls[1].prompt_ids, 202, 203, engine.eos]
    assert (traj.prompt_index, traj.weight_version, traj.row["_index"]) == (5, 7, 5)
    assert traj.stop_reason == "answered" and record.rewrites == 0
    assert traj.turns[0].info == {"tool_calls": 1, "tool_errors": 0}


def test_requests_of_every_live_episode_go_in_one_engine_call(tokenizer):
    engine = ScriptedEngine(tokenizer)
    gateway = serve(engine, tokenizer, batch_wait_s=5.0)  # only a full batch fires early
    with gateway.serving():
        keys = [gateway.open(index=i, row={"_index": i}) for i in range(4)]

        def agent(key):
            client = OpenAI(base_url=gateway.base_url(key), api_key="x")
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": key}])

        threads = [threading.Thread(target=agent, args=(k,)) for k in keys]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert time.perf_counter() - start < 2.0  # did not wait out batch_wait_s
    assert [len(prompts) for prompts, _ in engine.batches] == [4]
    [(_, settings)] = engine.batches
    assert (settings.group_size, settings.temperature, settings.max_tokens) == (1, 0.7, 32)


def test_a_tick_of_requests_with_different_max_tokens_is_one_engine_call(tokenizer):
    engine = ScriptedEngine(tokenizer)
    gateway = serve(engine, tokenizer, batch_wait_s=5.0)  # only a full tick fires early
    asked = {"a": 1, "b": 2, "c": 8}  # the last is cut by nothing: 3 tokens, EOS
    with gateway.serving():
        keys = {name: gateway.open(index=i, row={}) for i, name in enumerate(asked)}
        answers = {}

        def agent(name):
            body = {"messages": [{"role": "user", "content": name}], "max_tokens": asked[name]}
            answers[name] = post(f"{gateway.base_url(keys[name])}/chat/completions", body)

        threads = [threading.Thread(target=agent, args=(name,)) for name in asked]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    [(prompts, settings)] = engine.batches
    assert len(prompts) == 3 and settings.max_tokens == 8
    assert sorted(settings.max_tokens_each) == [1, 2, 8]
    got = {
        name: (status, a["usage"]["completion_tokens"], a["choices"][0]["finish_reason"])
        for name, (status, a) in answers.items()
    }
    assert got == {"a": (200, 1, "length"), "b": (200, 2, "length"), "c": (200, 3, "stop")}
    assert gateway.stats.engine_calls == 1 and gateway.stats.batched == 3


def test_a_request_waits_briefly_for_others_then_goes_alone(tokenizer):
    engine = ScriptedEngine(tokenizer)
    gateway = serve(engine, tokenizer, batch_wait_s=0.05)
    with gateway.serving():
        key = gateway.open(index=0, row={})
        gateway.open(index=1, row={})  # live, but never calls
        status, _ = post(
            f"{gateway.base_url(key)}/chat/completions",
            {"messages": [{"role": "user", "content": "hi"}]},
        )
    assert status == 200 and [len(p) for p, _ in engine.batches] == [1]


@pytest.mark.parametrize(
    "text, calls, errors",
    [
        (call("add", {"a": 1, "b": 2}), [("add", {"a": 1, "b": 2})], 0),
        (
            "Let me add. " + call("add", {"a": 1, "b": 2}) + call("add", {"a": 3, "b": 4}),
            [("add", {"a": 1, "b": 2}), ("add", {"a": 3, "b": 4})],
            0,
        ),
        ('<tool_call>{"name": "add", "arguments": {"a": 1,</tool_call>', [], 1),  # bad JSON
        ("<tool_call>" + json.dumps({"name": "add"}), [], 1),  # unclosed
        (call("mul", {"a": 1, "b": 2}), [], 1),  # unknown tool
        (call("add", {"a": "1", "b": 2}), [], 1),  # mistyped
        (call("add", {"a": 1}), [], 1),  # missing argument
        (call("add", {"a": 1, "b": 2}) + call("add", {"a": 1.5, "b": 2}), [], 1),  # one bad
        ("The answer is 4.", [], 0),
    ],
)
def test_tool_calls_are_parsed_all_or_nothing(text, calls, errors):
    reply = assistant_reply(text, tools=request_tools([ADD]))
    got = [
        (c["function"]["name"], json.loads(c["function"]["arguments"])) for c in reply.tool_calls
    ]
    assert got == calls and len(reply.errors) == errors
    if errors:  # refused: the model's text comes back as it was written
        assert reply.content == text and "tool_calls" not in reply.message()
    if calls:
        assert reply.content == ("Let me add." if text.startswith("Let") else None)


def test_a_tool_whose_parameters_are_not_a_json_schema_is_refused():
    bad = {"type": "function", "function": {"name": "f", "parameters": {"type": "text"}}}
    with pytest.raises(ValueError, match=r"tools\[0\]\.function\.parameters\['type'\] is not"):
        request_tools([bad])
    listed = {"type": "function", "function": {**ADD["function"], "parameters": []}}
    with pytest.raises(ValueError, match=r"tools\[1\]\.function\.parameters is not a valid"):
        request_tools([ADD, listed])


def test_malformed_calls_come_back_as_text_and_are_counted(tokenizer):
    engine = ScriptedEngine(tokenizer, reply=lambda c: call("mul", {"a": 1}))
    gateway = serve(engine, tokenizer)
    with gateway.serving():
        key = gateway.open(index=0, row={})
        client = OpenAI(base_url=gateway.base_url(key), api_key="x")
        out = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], tools=[ADD]
        )
    assert out.choices[0].finish_reason == "stop" and out.choices[0].message.tool_calls is None
    assert out.choices[0].message.content.startswith("<tool_call>")
    assert gateway.episodes[key].tool_call_errors == 1


def test_a_rewritten_history_starts_a_new_segment_and_trains_the_last(tokenizer):
    engine = ScriptedEngine(tokenizer, reply=lambda c: "ok")
    gateway = serve(engine, tokenizer)
    with gateway.serving():
        key = gateway.open(index=0, row={"_index": 0})
        client = OpenAI(base_url=gateway.base_url(key), api_key="x")
        first = [{"role": "user", "content": "a long question"}]
        client.chat.completions.create(model="m", messages=first)
        edited = [
            *first,
            {"role": "assistant", "content": "not what you said"},
            {"role": "user", "content": "and?"},
        ]
        client.chat.completions.create(model="m", messages=edited)
    record = gateway.episodes[key]
    traj = record.trajectory(fallback_prompt=[])
    assert record.rewrites == 1 and len(record.segments) == 2
    assert traj.prompt_ids == chat_prompt_ids(tokenizer, edited)
    assert len(traj.turns) == 1 and traj.turns[0].completion.token_ids[0] == 202


def test_errors_are_openai_shaped_and_never_retried_statuses(tokenizer):
    gateway = serve(ScriptedEngine(tokenizer), tokenizer, max_turns=1, max_model_len=64)
    with gateway.serving():
        key = gateway.open(index=0, row={})
        url = gateway.base_url(key)
        hello = {"messages": [{"role": "user", "content": "hi"}]}
        cases = [
            (f"{gateway.url}/e/nope/v1/chat/completions", hello, 401, "invalid_api_key"),
            (f"{url}/chat/completions", b"{not json", 400, "invalid_json"),
            (f"{url}/chat/completions", {"messages": []}, 400, "invalid_messages"),
            (f"{url}/chat/completions", {**hello, "n": 2}, 400, "invalid_n"),
            (f"{url}/chat/completions", {**hello, "tools": [{"x": 1}]}, 400, "invalid_tools"),
            (f"{url}/nowhere", hello, 404, "not_found"),
            (
                f"{url}/chat/completions",
                {"messages": [{"role": "user", "content": "7" * 200}]},
                400,
                "context_length_exceeded",
            ),
        ]
        for target, body, status, code in cases:
            got, answer = post(target, body)
            assert (got, answer["error"]["code"]) == (status, code), target
            assert set(answer["error"]) == {"message", "type", "param", "code"}
        assert post(f"{url}/chat/completions", hello)[0] == 200
        got, answer = post(f"{url}/chat/completions", hello)  # a second call: max_turns=1
        assert (got, answer["error"]["code"]) == (400, "max_turns_exceeded")
        gateway.finish(key)
        got, answer = post(f"{url}/chat/completions", hello)
        assert (got, answer["error"]["code"]) == (410, "episode_closed")
    assert gateway.episodes[key].stop_reason == "max_turns"


def test_the_api_key_names_the_episode_and_the_reward_call_records(tokenizer):
    gateway = serve(ScriptedEngine(tokenizer), tokenizer)
    with gateway.serving():
        key = gateway.open(index=0, row={})
        client = OpenAI(base_url=f"{gateway.url}/v1", api_key=key)
        assert [m.id for m in client.models.list()] == ["grouprl-policy"]
        out = client.completions.create(model="m", prompt="1+1=", max_tokens=4)
        assert out.choices[0].text == "4"
        assert gateway.episodes[key].calls[0].prompt_ids == tokenizer.encode(
            "1+1=", add_special_tokens=False
        )
        assert post(f"{gateway.base_url(key)}/reward", {"reward": "high"})[0] == 400
        assert post(f"{gateway.base_url(key)}/reward", {"reward": 0.75}) == (200, {"ok": True})
    assert gateway.episodes[key].reported_reward == 0.75


def test_stream_answers_one_chunk(tokenizer):
    gateway = serve(ScriptedEngine(tokenizer, reply=lambda c: "hello"), tokenizer)
    with gateway.serving():
        key = gateway.open(index=0, row={})
        client = OpenAI(base_url=gateway.base_url(key), api_key="x")
        chunks = list(
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], stream=True
            )
        )
    assert [c.choices[0].delta.content for c in chunks] == ["hello"]


# --- agent rollouts ----------------------------------------------------------------------


def two_turn_agent(base_url, task, **kwargs):
    """Two turns, then a reward by the row: returned, reported, or left to the functions."""
    client = OpenAI(base_url=base_url, api_key=kwargs["api_key"], max_retries=0)
    messages = [{"role": "user", "content": task["question"]}]
    reply = client.chat.completions.create(model=kwargs["model"], messages=messages)
    messages += [
        {"role": "assistant", "content": reply.choices[0].message.content},
        {"role": "user", "content": "Sure?"},
    ]
    client.chat.completions.create(model=kwargs["model"], messages=messages)
    mode = task["mode"]
    if mode == "raise":
        raise RuntimeError("agent bug")
    if mode == "hang":
        time.sleep(30)
    if mode == "report":
        from grouprl.agents import report_reward

        report_reward(base_url, 0.25)
        return None
    return 0.5 if mode == "return" else None


class PromptSet:
    def __init__(self, rows):
        self.rows, self.prompts = rows, [[1, 2, 3]] * len(rows)


@pytest.mark.slow  # its hanging agent's thread sleeps 30 s: a short session waits at exit
def test_an_agent_rollout_scores_returned_reported_and_failed_episodes(tokenizer):
    """On threads (env.sandbox.workers=0), with env.on_error=zero: failed agents train as
    reward 0 (the pool's containment is the next test's)."""
    modes = ["return", "report", "score", "raise", "hang"]
    cfg = RunConfig.model_validate(
        {
            "env": {
                "agent": {"name": f"{__file__}:two_turn_agent", "timeout_s": 1.0},
                "sandbox": {"workers": 0},
                "on_error": "zero",
            },
            "rollout": {"n": 1, "max_model_len": 512},
        }
    )
    engine = ScriptedEngine(tokenizer, reply=lambda c: "4")

    def score(completions, rows, **kwargs):
        return RewardScores(total=[1.0] * len(rows), parts={"fn": [1.0] * len(rows)})

    rollout = AgentRollout(cfg, engine=engine, tokenizer=tokenizer, score=score)
    rows = [{"_index": 10 + i, "question": "2+2", "mode": m} for i, m in enumerate(modes)]
    try:
        start = time.perf_counter()
        trajectories, scores = rollout(
            PromptSet(rows), SamplingSettings(group_size=1, max_tokens=8)
        )
        assert time.perf_counter() - start < 2.5  # the hanging agent cost its deadline only
    finally:
        rollout.close()
    assert [t.reward for t in trajectories] == [0.5, 0.25, 1.0, 0.0, 0.0]
    assert scores.total == [0.5, 0.25, 1.0, 0.0, 0.0]
    parts = [t.reward_parts for t in trajectories]
    assert [(p.agent, p.failure, p.dropped) for p in parts] == [
        (0.5, None, None),
        (0.25, None, None),
        (None, None, None),
        (None, "agent_error", False),
        (None, "agent_error", False),
    ]
    assert all(t.trains for t in trajectories)  # on_error=zero
    # the functions scored only the episode whose reward they decide (no agent reward,
    # no failure): the others' scores would go unused
    assert [p.scores for p in parts] == [{}, {}, {"fn": 1.0}, {}, {}]
    assert scores.parts["fn"] == [1.0]
    assert parts[3].error == "RuntimeError: agent bug"
    assert parts[4].error == "TimeoutError: past env.agent.timeout_s=1"
    assert scores.errors == []  # the reward functions did not fail
    assert [len(t.turns) for t in trajectories] == [2] * 5
    assert [t.stop_reason for t in trajectories][3:] == ["env_error", "env_error"]
    metrics = gateway_metrics(trajectories, prefix="eval/")
    assert metrics["eval/gateway/agent_errors"] == 2 / 5
    assert metrics["eval/gateway/agent_timeouts"] == 1 / 5
    assert metrics["eval/gateway/reported_rewards"] == 1 / 5
    assert metrics["eval/gateway/calls"] == 2.0


LIGHT_AGENT = """
import json, os, time, urllib.request


def chat(base_url, messages):
    body = json.dumps({"messages": messages}).encode()
    request = urllib.request.Request(f"{base_url}/chat/completions", data=body, method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())["choices"][0]["message"]["content"]


def solve(base_url, task, **kwargs):
    messages = [{"role": "user", "content": task["question"]}]
    reply = chat(base_url, messages)
    if task["mode"] == "crash":
        os._exit(3)  # the worker dies while the others wait on their second call
    if task["mode"] == "hang":
        time.sleep(30)
    chat(base_url, messages + [{"role": "assistant", "content": reply},
                               {"role": "user", "content": "Sure?"}])
    return task["reward"]
"""


@pytest.mark.procs
def test_an_agent_that_hangs_or_crashes_its_worker_fails_only_its_own_episode(
    tokenizer, tmp_path, caplog
):
    """Four agents on one worker (the default pool, not threads): one crashes the worker
    (os._exit) while the others are in flight, one hangs past its deadline. The agents
    the crash took with it run again (alone, their episodes started over: two calls, no
    rewrite); only the two failed episodes fail (agent_error, dropped)."""
    agent = tmp_path / "light_agent.py"
    agent.write_text(LIGHT_AGENT)
    cfg = RunConfig.model_validate(
        {
            "env": {
                "agent": {"name": f"{agent}:solve", "timeout_s": 1.5, "concurrency": 5},
                "sandbox": {"workers": 1},
            },
            "rollout": {"n": 1, "max_model_len": 512},
        }
    )
    engine = ScriptedEngine(tokenizer, reply=lambda c: "4")

    def score(completions, rows, **kwargs):
        return RewardScores(total=[0.0] * len(rows), parts={})

    modes = ["return", "crash", "hang", "return"]
    rows = [
        {"_index": i, "question": f"q{i}", "mode": m, "reward": 0.1 * (i + 1)}
        for i, m in enumerate(modes)
    ]
    rollout = AgentRollout(cfg, engine=engine, tokenizer=tokenizer, score=score)
    try:
        start = time.perf_counter()
        trajectories, _ = rollout(PromptSet(rows), SamplingSettings(group_size=1, max_tokens=8))
        assert time.perf_counter() - start < 10.0
    finally:
        rollout.close()
    info = [t.turns[0].info["gateway"] for t in trajectories]
    errors = [t.reward_parts.error for t in trajectories]
    assert [i["failure"] for i in info] == [None, "WorkerCrash", "TimeoutError", None], errors
    parts = [t.reward_parts for t in trajectories]
    assert [p.failure for p in parts] == [None, "agent_error", "agent_error", None]
    assert [t.trains for t in trajectories] == [True, False, False, True]
    for k in (0, 3):  # each survivor: its own reward, its own run's two calls only
        assert trajectories[k].reward == pytest.approx(0.1 * (k + 1))
        assert (info[k]["calls"], info[k]["rewrites"], len(trajectories[k].turns)) == (2, 0, 2)
    # in flight at the crash: run again (its record started over: the rerun's one call
    # only, no rewrite), then past its deadline
    assert (info[2]["reruns"], info[2]["calls"], info[2]["rewrites"]) == (1, 1, 0)
    assert "2 of 4 agent episodes failed (1 WorkerCrash, 1 TimeoutError)" in caplog.text


@pytest.mark.parametrize(
    ("error", "level", "traceback"),
    [
        (GenerationAborted("aborted at a segment boundary"), logging.INFO, False),
        (RuntimeError("CUDA out of memory"), logging.ERROR, True),
    ],
)
def test_an_aborted_batch_logs_one_line_and_an_engine_failure_its_traceback(
    tokenizer, caplog, error, level, traceback
):
    """The stream's stop aborts a gateway batch (expected: one line); any other engine
    error is logged with its traceback. Either way the batch's calls fail with 500 and the
    rollout re-raises the error."""

    class FailingEngine:
        weight_version = 0

        def generate(self, prompts, settings):
            raise error

    gateway = serve(FailingEngine(), tokenizer)
    with (
        caplog.at_level(logging.INFO, logger="grouprl.rollout.gateway.server"),
        gateway.serving(),
    ):
        key = gateway.open(index=0, row={})
        hello = {"messages": [{"role": "user", "content": "hi"}]}
        got, answer = post(f"{gateway.base_url(key)}/chat/completions", hello)
    assert (got, answer["error"]["code"]) == (500, "engine_error")
    assert gateway.engine_error is error
    [record] = [r for r in caplog.records if r.name == "grouprl.rollout.gateway.server"]
    assert record.levelno == level
    assert (record.exc_info is not None) == traceback
