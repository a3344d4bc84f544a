"""The ``llm_judge`` reward (rewards/judge.py, judge_client.py, judge_checks.py): its
parse rules by hand, the template, the config-time refusals with their messages, and the
real scorer path against a stdlib HTTP server that answers, hangs, errs (500, 429, 400)
and answers garbage: those samples fail alone, counted per kind, never scored 0; the
others score; a judge that is down trips the failure brake."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from grouprl.config.loader import load_config
from grouprl.config.reward import RewardConfig, RewardFunction
from grouprl.rewards.failures import CannotTrain, SampleFailed
from grouprl.rewards.judge import LLMJudge, render, template_problems
from grouprl.rewards.judge_checks import judge_problems
from grouprl.rewards.judge_client import JudgeError
from grouprl.rewards.registry import resolve_rewards

pytestmark = pytest.mark.unit

YES_NO = {"yes": 1, "no": 0}


def judge(**args) -> LLMJudge:
    return LLMJudge(**({"path": "builtin:tiny-arith-judge", "template": "{completion}"} | args))


def failure(fn, answer: str) -> tuple[str, str]:
    with pytest.raises(JudgeError) as err:
        fn(answer)
    return err.value.kind, str(err.value)


def test_labels_read_the_first_word_case_and_punctuation_ignored():
    score = judge(labels=YES_NO).score
    assert [score("yes"), score("Yes."), score("  NO, it is not"), score("yes!\nmore")] == [
        1.0,
        1.0,
        0.0,
        1.0,
    ]
    # a label later in the answer is not its first word: a refusal, not a guess
    kind, message = failure(score, "I think yes")
    assert kind == "refusal" and "first word 'i' is none of the labels ['no', 'yes']" in message
    assert failure(score, "   ")[0] == "refusal"  # nothing answered
    assert failure(score, "")[0] == "refusal"


def test_number_is_the_first_number_checked_against_the_range():
    score = judge(parse="number", range=[0, 10]).score
    assert score("7") == 7.0
    assert score("Score: 7/10, because 12 steps") == 7.0  # the first number
    assert score("-0 points") == 0.0 and score("2.5e0") == 2.5
    kind, message = failure(score, "11 out of 10")
    assert kind == "parse" and "11 is not within [0, 10]" in message
    kind, message = failure(score, "excellent")
    assert kind == "parse" and "no number in the answer 'excellent'" in message
    assert judge(parse="number").score("1e3") == 1000.0  # no range: any finite number


def test_regex_takes_its_one_group_as_the_number():
    score = judge(parse="regex", pattern=r"Rating:\s*\[\[(.*?)\]\]", range=[1, 10]).score
    assert score("The answer is fine. Rating: [[8]]") == 8.0
    assert failure(score, "Rating: 8")[0] == "parse"  # not found
    kind, message = failure(score, "Rating: [[good]]")
    assert kind == "parse" and "'good', not a number" in message
    assert failure(score, "Rating: [[0]]")[0] == "parse"  # below the range


def test_settings_that_do_not_make_a_judge_name_the_setting():
    def problems(**args) -> list[str]:
        return LLMJudge(**args).setting_problems()

    fine = {"template": "{completion}", "labels": YES_NO}
    assert problems(path="builtin:tiny-arith-judge", **fine) == []
    assert problems(url="http://127.0.0.1:1/v1", model="m", **fine) == []
    (neither,) = problems(**fine)
    assert neither.startswith("url=None, path=None: a judge is exactly one of url")
    (both,) = problems(url="http://x/v1", model="m", path="p", **fine)
    assert "exactly one" in both and "Fix: set one" in both
    (model,) = problems(url="http://x/v1", **fine)
    assert model.startswith("model=None with url='http://x/v1'")
    (hot,) = problems(path="p", temperature=0.7, **fine)
    assert hot.startswith("temperature=0.7 with path") and "greedily" in hot
    (labels,) = problems(path="p", template="{completion}")
    assert labels.startswith("labels=None with parse='labels'") and "Fix:" in labels
    (pattern,) = problems(path="p", template="{completion}", parse="regex")
    assert pattern.startswith("pattern=None with parse='regex'")
    # values wrong by themselves are refused as they are set
    for bad, text in (
        ({"parse": "regex", "pattern": "(unclosed"}, "does not compile"),
        ({"parse": "regex", "pattern": r"\d+"}, "has 0 groups, not 1"),
        ({"labels": {True: 1, False: 0}}, "YAML reads a bare yes/no"),
        ({"labels": {"yes please": 1}}, "one word"),
        ({"parse": "number", "range": [10, 0]}, "low <= high"),
        ({"concurrency": 0}, "concurrency=0: must be 1 or more"),
    ):
        with pytest.raises(ValueError, match=text):
            LLMJudge(**bad)


def test_a_worker_deadline_below_a_requests_retries_is_refused():
    from grouprl.rewards.registry import reward_problems

    args = {"url": "http://x/v1", "model": "m", "template": "{completion}", "labels": YES_NO}
    # 10 s per try, 3 tries, waits of 1 and 2 s, and 2 s to spare: 35 s
    (problem,) = reward_problems([RewardFunction(name="llm_judge", args=args)], timeout_s=10)
    assert "'llm_judge' needs up to 35s per call" in problem
    assert problem.endswith("Fix: set reward.sandbox.timeout_s=35 or more")
    (problem,) = reward_problems([RewardFunction(name="llm_judge", args=args)], timeout_s=30)
    assert problem.endswith("or more, or reward.functions.0.args.timeout_s=5 or less")
    entry = RewardFunction(name="llm_judge", args={**args, "retries": 0})
    assert reward_problems([entry], timeout_s=12) == []  # one try of 10 s and 2 to spare
    local = RewardFunction(name="llm_judge", args={**args, "url": None, "path": "p"})
    assert reward_problems([local], timeout_s=1) == []  # a local judge declares none


def test_template_fields_and_rendering():
    assert template_problems("Q: {question}\nA: {completion}\nRef: {reference} {{x}}") == []
    (missing,) = template_problems("Is {reference} right?")
    assert "has no {completion} field" in missing and "Fix:" in missing
    problems = template_problems("{completion} {row.x} {0} {completion!r}")
    assert len(problems) == 3 and all("not a plain name" in p for p in problems)
    assert "does not parse" in template_problems("{completion")[0]
    assert "not set" in template_problems("")[0]
    row = {"question": [{"role": "system", "content": "s"}, {"role": "user", "content": "q?"}]}
    text = render("{question}|{completion}|{reference}|{{}}", "c", reference=None, row=row)
    assert text == "q?|c||{}"  # a conversation: its last user message; no reference: ""
    with pytest.raises(KeyError, match="template field 'nope' is not a column"):
        render("{nope} {completion}", "c", reference="r", row={"question": "q"})


def test_the_judge_is_called_per_group_and_declares_itself_learned():
    entry = RewardFunction(
        name="llm_judge", args={"path": "p", "template": "{completion}", "labels": YES_NO}
    )
    (reward,) = resolve_rewards([entry])
    assert reward.scope == "group" and reward.fn.learned


def _config(overrides: list[str]):
    return load_config("tiny-arith-judge", ["data.eval=null", *overrides])


def _problems(overrides: list[str]) -> list[str]:
    """``judge_problems`` of the recipe with ``overrides``, checked to take under 2 s."""
    cfg = _config(overrides)
    t0 = time.monotonic()
    problems = judge_problems(cfg)
    assert time.monotonic() - t0 < 2.0 + 0.5  # the probe's 2 s at most, and the rest
    return problems


def test_config_time_refusals_name_the_key_the_value_and_the_fix(tmp_path):
    assert _problems([]) == []
    arg = "reward.functions.0.args"
    url = f"{arg}.url=http://127.0.0.1:{_closed_port()}/v1"
    (network,) = _problems([f"{arg}.path=null", url, f"{arg}.model=m"])
    assert network.startswith(f"{arg}.url='http://127.0.0.1:") and "reward.network=false" in network
    assert "Fix: set reward.network=true" in network and f"{arg}.path" in network
    (down,) = _problems([f"{arg}.path=null", url, f"{arg}.model=m", "reward.network=true"])
    assert "did not answer within 2s" in down and "Connection refused" in down
    assert "Fix: start the judge server" in down
    (both,) = _problems([url, f"{arg}.model=m", "reward.network=true"])
    assert both.startswith(f"{arg}.url='http://127.0.0.1:") and "exactly one" in both
    (field,) = _problems([f"{arg}.template='{{completion}} {{answr}}'"])
    assert field.startswith(f"{arg}.template uses {{answr}}, which is neither")
    assert "allowed fields: {completion}, {reference}, {answer}, {question}" in field
    (no_completion,) = _problems([f"{arg}.template='Is {{reference}} right?'"])
    assert no_completion.startswith(f"{arg}.template='Is {{reference}} right?' has no")
    (path,) = _problems([f"{arg}.path={tmp_path / 'no-judge'}"])
    assert path.startswith(f"{arg}.path=") and "not found" in path
    (builtin,) = _problems([f"{arg}.path=builtin:no-judge"])
    assert "no shipped model named 'no-judge'" in builtin


def test_a_judge_url_that_hangs_is_refused_in_two_seconds(judge_server):
    arg = "reward.functions.0.args"
    with socket.socket() as silent:  # listens, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        hanging = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        base = [f"{arg}.path=null", f"{arg}.model=judge", "reward.network=true"]
        (hangs,) = _problems([*base, f"{arg}.url={hanging}"])
    assert "did not answer within 2s" in hangs and "timed out" in hangs
    # a server that answers, serving another model than asked
    (other,) = _problems(
        [f"{arg}.path=null", f"{arg}.model=gpt", "reward.network=true", f"{arg}.url={judge_server}"]
    )
    assert other.startswith(f"{arg}.model='gpt' is not served at {judge_server}")
    assert "['judge']" in other
    assert _problems([*base, f"{arg}.url={judge_server}"]) == []


def test_a_pattern_that_does_not_compile_is_refused_before_anything_loads():
    from grouprl.driver.preflight import input_problems

    cfg = _config(
        [
            "reward.functions.0.args.parse=regex",
            "reward.functions.0.args.labels=null",
            "reward.functions.0.args.pattern='([0-9]'",
        ]
    )
    problems = [p for p in input_problems(cfg) if "pattern" in p]
    assert problems and problems[0].startswith("reward.functions.0.args.pattern='([0-9]'")
    assert "does not compile" in problems[0] and "Fix:" in problems[0]


class _Judge(BaseHTTPRequestHandler):
    """A judge server whose answer depends on the completion (the whole template): it
    answers yes/no, hangs, errs (500, 429, 400), answers garbage or a body that is no chat
    completion; ``flaky`` errs once, then answers."""

    seen: ClassVar[Counter] = Counter()

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self._reply(200, {"data": [{"id": "judge"}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        text = body["messages"][0]["content"]
        self.seen[text] += 1
        if text == "hang":
            time.sleep(2.0)
        elif text in ("e500", "e429", "e400") or (text == "flaky" and self.seen[text] == 1):
            code = 500 if text == "flaky" else int(text[1:])
            self._reply(code, {"error": "no"}, headers={"Retry-After": "0"})
        elif text == "notjson":
            self._raw(200, b"<html>busy</html>")
        else:
            answer = {"right": "Yes.", "flaky": "yes", "wrong": "no", "garbage": "banana"}[text]
            self._reply(200, {"choices": [{"message": {"role": "assistant", "content": answer}}]})

    def _reply(self, code: int, payload: dict, headers: dict | None = None) -> None:
        self._raw(code, json.dumps(payload).encode(), headers)

    def _raw(self, code: int, data: bytes, headers: dict | None = None) -> None:
        try:
            self.send_response(code)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout)
            pass


@pytest.fixture
def judge_server() -> Iterator[str]:
    _Judge.seen = Counter()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Judge)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scorer(url: str, **reward):
    from grouprl.rewards.scoring import RewardScorer

    args = {
        "url": url,
        "model": "judge",
        "template": "{completion}",
        "labels": YES_NO,
        "timeout_s": 0.5,
        "retries": 1,
        "backoff_s": 0.05,
        "concurrency": 4,
    }
    config = RewardConfig(
        functions=[RewardFunction(name="llm_judge", args=args)],
        network=True,
        **({"sandbox": {"workers": 1, "timeout_s": 10}} | reward),
    )
    return RewardScorer(config, answer_key="answer")


@pytest.mark.procs  # reward worker processes
def test_hangs_errors_and_garbage_fail_alone_counted_per_kind(judge_server):
    from grouprl.rewards.scoring import metrics

    texts = ["right", "hang", "e500", "garbage", "wrong", "e429", "flaky", "notjson", "e400"]
    texts += ["right"] * 3  # three groups of four
    rows = [{"_index": i // 4, "answer": "1"} for i in range(len(texts))]
    scorer = _scorer(judge_server)
    try:
        scores = scorer(completions=texts, rows=rows, group_size=4)
        assert scorer.brake.failing("llm_judge") == 0  # the last samples scored
    finally:
        scorer.close()
    failed = {e.sample_index: (e.kind, e.error_type) for e in scores.errors}
    assert failed == {
        1: ("timeout", "JudgeTimeout"),
        2: ("http", "JudgeHTTPError"),
        3: ("refusal", "JudgeRefused"),
        5: ("rate_limit", "JudgeHTTPError"),
        7: ("bad_response", "JudgeBadResponse"),
        8: ("http", "JudgeHTTPError"),
    }
    assert all(e.samples == 1 and e.reported for e in scores.errors)  # alone, not the group
    assert "HTTP 429" in next(e.message for e in scores.errors if e.kind == "rate_limit")
    parts = scores.parts["llm_judge"]
    assert [parts[i] for i in (0, 4, 6, 9, 10, 11)] == [1.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    # retried: timeouts, 5xx and 429 (1 + retries=1 tries); a 400 and garbage once
    seen = _Judge.seen
    assert (seen["hang"], seen["e500"], seen["e429"], seen["flaky"]) == (2, 2, 2, 2)
    assert (seen["e400"], seen["garbage"], seen["notjson"]) == (1, 1, 1)
    out = metrics(scores)
    assert out["reward/llm_judge/failures"] == 6.0
    assert out["reward/llm_judge"] == pytest.approx(5 / 6)  # the six scored, failures out
    kinds = {k: v for k, v in out.items() if "/failed/" in k}
    assert kinds == {
        "reward/llm_judge/failed/timeout": 1.0,
        "reward/llm_judge/failed/http": 2.0,
        "reward/llm_judge/failed/refusal": 1.0,
        "reward/llm_judge/failed/rate_limit": 1.0,
        "reward/llm_judge/failed/bad_response": 1.0,
    }
    assert out["reward/timeouts"] == 1.0 and out["reward/errors"] == 6.0


@pytest.mark.procs  # reward worker processes
def test_a_judge_that_is_down_trips_the_failure_brake():
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    scorer = _scorer(url, failure_brake=5)
    rows = [{"_index": i // 4, "answer": "1"} for i in range(8)]
    try:
        with pytest.raises(CannotTrain) as stopped:
            scorer(completions=["right"] * 8, rows=rows, group_size=4)
    finally:
        scorer.close()
    message = str(stopped.value)
    assert "'llm_judge' failed on its last 5 calls in a row" in message
    assert "JudgeUnreachable" in message and "did not answer the connection" in message


def test_a_group_value_may_fail_one_sample_alone():
    from grouprl.rewards.calls import score_group

    def half(completions, **_):
        return [1.0 if c == "ok" else SampleFailed("parse", "JudgeParse", "?") for c in completions]

    values = score_group(half, ["ok", "bad"], references=[None, None], rows=[{}, {}])
    assert values[0].score == 1.0 and values[1] == SampleFailed("parse", "JudgeParse", "?")
