"""The distillation teacher (engines/teacher.py, config/teacher.py): the hf engine's logprobs
of given tokens against a plain forward pass worked by hand, the teacher over replicas
(order, balance, frozen), and the refusals before anything loads."""

from __future__ import annotations

import json
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from grouprl.assets import ASSETS_DIR
from grouprl.config.loader import load_config
from grouprl.config.teacher_checks import teacher_problems, teacher_run_config
from grouprl.driver.preflight import input_problems
from grouprl.engines.hf_engine import HFEngine
from grouprl.engines.placement import in_driver
from grouprl.engines.replicas import ReplicaSet, Slot
from grouprl.engines.teacher import Teacher, make_teacher

TINY = ASSETS_DIR / "tiny-arith"
DISTILL = ["teacher.path=builtin:tiny-arith", "algo.teacher_coef=1"]


@pytest.fixture(scope="module")
def model():
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(TINY, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(TINY)


@pytest.fixture(scope="module")
def sequences(tokenizer) -> tuple[list[list[int]], list[int]]:
    """Prompt + answer ids of unequal lengths, each start where its answer begins."""
    ids, starts = [], []
    for question, answer in [
        ("Tom has 3 apples and buys 4 more. How many?", "3+4=7\n#### 7"),
        ("What is 12 minus 5?", "#### 7"),
        ("Sam reads 2 pages a day for 6 days. How many pages?", "2*6=12 pages\n#### 12"),
    ]:
        prompt = tokenizer.apply_chat_template(
            [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=False
        )
        p = tokenizer(prompt, add_special_tokens=False).input_ids
        a = [*tokenizer(answer, add_special_tokens=False).input_ids, tokenizer.eos_token_id]
        ids.append(p + a)
        starts.append(len(p))
    return ids, starts


def by_hand(model, seq: list[int], start: int) -> list[float]:
    """log softmax(logits at t - 1)[seq[t]] from one unpadded forward pass."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([seq])).logits[0].float()
    return [float(logits[t - 1].log_softmax(-1)[seq[t]]) for t in range(start, len(seq))]


def test_hf_token_logprobs_are_the_forward_pass_by_hand(model, tokenizer, sequences):
    ids, starts = sequences
    engine = HFEngine(model, tokenizer, device="cpu", max_batch_rows=2)  # two batches
    got = engine.token_logprobs(ids, starts)
    assert [len(g) for g in got] == [len(s) - b for s, b in zip(ids, starts, strict=True)]
    for g, seq, start in zip(got, ids, starts, strict=True):
        assert g == pytest.approx(by_hand(model, seq, start), abs=1e-5)
        assert all(x < 0 for x in g)
    # from the second token: the prompt's own tokens too; a start at the end scores nothing
    whole = engine.token_logprobs([ids[1]], [1])[0]
    assert whole == pytest.approx(by_hand(model, ids[1], 1), abs=1e-5)
    assert engine.token_logprobs([ids[0]], [len(ids[0])]) == [[]]


def test_hf_top_logprobs_are_the_forward_pass_by_hand(model, tokenizer, sequences):
    """The top k at each scored position: the k largest of that position's log-softmax,
    most likely first; the given tokens' logprobs are token_logprobs'."""
    ids, starts = sequences
    engine = HFEngine(model, tokenizer, device="cpu", max_batch_rows=2)
    got = engine.top_logprobs(ids, starts, 3)
    assert [g for g, _, _ in got] == engine.token_logprobs(ids, starts)
    for (_, top_ids, top_lps), seq, start in zip(got, ids, starts, strict=True):
        with torch.no_grad():
            logp = model(input_ids=torch.tensor([seq])).logits[0].float().log_softmax(-1)
        assert len(top_ids) == len(top_lps) == len(seq) - start
        for t, (row_ids, row_lps) in enumerate(zip(top_ids, top_lps, strict=True), start):
            want = logp[t - 1].topk(3)
            assert row_ids == want.indices.tolist()
            assert row_lps == pytest.approx(want.values.tolist(), abs=1e-5)
            assert row_lps == sorted(row_lps, reverse=True)


def test_the_teacher_splits_over_replicas_and_joins_in_order(model, tokenizer, sequences):
    ids, starts = sequences
    one = Teacher(in_driver(HFEngine(model, tokenizer, device="cpu")))
    engines = [HFEngine(model, tokenizer, device="cpu") for _ in range(2)]
    calls: list[int] = []
    for k, engine in enumerate(engines):
        score = engine.token_logprobs

        def counted(i, s, k=k, score=score):
            calls.append((k, len(i)))
            return score(i, s)

        engine.token_logprobs = counted
    two = Teacher(ReplicaSet(engines, [Slot(0, "", "driver")] * 2, ["a", "b"]))
    split, whole = two.token_logprobs(ids, starts), one.token_logprobs(ids, starts)
    assert [len(x) for x in split] == [len(x) for x in whole]
    for a, b in zip(split, whole, strict=True):  # other batches pad otherwise: fp noise only
        assert a == pytest.approx(b, abs=1e-5)
    assert sorted(calls) == [(0, 2), (1, 1)]  # contiguous runs balanced by tokens
    assert two.token_logprobs([], []) == []
    with pytest.raises(ValueError, match="sequence 1 has start 0 for"):
        two.token_logprobs(ids, [starts[0], 0, starts[2]])
    with pytest.raises(ValueError, match="3 sequences but 2 starts"):
        two.token_logprobs(ids, starts[:2])
    one.close()
    two.close()


def test_a_pushed_teacher_refuses_to_score(model, tokenizer, sequences):
    ids, starts = sequences
    engine = HFEngine(model, tokenizer, device="cpu")
    teacher = Teacher(in_driver(engine))
    assert not hasattr(teacher, "update_weights") and not hasattr(teacher, "stage_weights")
    before = teacher.token_logprobs(ids, starts)
    engine.update_weights(model.named_parameters(), version=3)  # only by reaching inside
    with pytest.raises(RuntimeError, match="received a weight push: a teacher is frozen"):
        teacher.token_logprobs(ids, starts)
    engine._version = 0
    assert teacher.token_logprobs(ids, starts) == before  # the same weights: the same numbers
    teacher.close()


def test_make_teacher_builds_the_configured_engine_in_the_driver(model, sequences):
    ids, starts = sequences
    cfg = load_config(
        "tiny-arith", [*DISTILL, "teacher.engine=hf", "train.device=cpu", "rollout.engine=vllm"]
    )
    teacher = make_teacher(cfg)
    try:
        got = teacher.token_logprobs(ids, starts)
    finally:
        teacher.close()
    for g, seq, start in zip(got, ids, starts, strict=True):
        assert g == pytest.approx(by_hand(model, seq, start), abs=1e-5)


def test_the_teacher_config_takes_the_rollouts_placement():
    cfg = load_config(
        "tiny-arith",
        [*DISTILL, "teacher.dtype=bfloat16", "teacher.gpu_memory_utilization=0.15"],
    )
    t = teacher_run_config(cfg)
    assert t.model.path == "builtin:tiny-arith" and t.model.dtype == "bfloat16"
    assert t.rollout.engine == "vllm" and t.rollout.replicas == cfg.rollout_replicas == 1
    assert t.rollout.gpu_memory_utilization == 0.15
    assert t.rollout.max_model_len == cfg.rollout.max_model_len + 1  # a full sample fits
    assert t.teacher is None and t.rollout.placement == cfg.rollout.placement
    assert cfg.rollout.max_model_len == 256 and cfg.model.dtype == "auto"  # unchanged
    two = teacher_run_config(load_config("tiny-arith", [*DISTILL, "teacher.replicas=2"]))
    assert two.rollout_replicas == 2 and two.rollout_in_actors


def _copy(tmp_path, name="teacher"):
    out = tmp_path / name
    shutil.copytree(TINY, out, ignore=shutil.ignore_patterns("*.safetensors"))
    return out


def _edit(path, change):
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _problems(overrides, *, through_preflight: bool = False):
    """The teacher's problems, found in well under the 2 s of a config-time check;
    ``through_preflight``: also as ``input_problems`` lists them."""
    cfg = load_config("tiny-arith", overrides)
    t0 = time.perf_counter()
    problems = teacher_problems(cfg)
    assert time.perf_counter() - t0 < 0.5
    if through_preflight:
        assert problems == [p for p in input_problems(cfg) if p.startswith("teacher")]
    return problems


def test_a_teacher_of_the_students_tokenizer_and_end_token_passes(tmp_path):
    assert _problems(DISTILL) == []
    assert _problems(["teacher.path=" + str(_copy(tmp_path)), "algo.teacher_coef=0.5"]) == []
    assert teacher_problems(load_config("tiny-arith", [])) == []  # no teacher: nothing to check


def test_a_teacher_whose_context_is_shorter_than_a_sample_is_refused(tmp_path):
    copy = _copy(tmp_path)
    _edit(copy / "config.json", lambda data: data.update(max_position_embeddings=200))
    overrides = [f"teacher.path={copy}", "algo.teacher_coef=1"]
    [problem] = _problems(overrides, through_preflight=True)  # rollout.max_model_len: 256
    assert problem.startswith(f"teacher.path='{copy}' reads 200 positions at most")
    assert "rollout.max_model_len + 1 = 257" in problem
    assert "rollout.max_model_len=199 or less" in problem
    assert _problems([*overrides, "rollout.max_model_len=199"]) == []


def test_a_teacher_with_another_tokenizer_is_refused(tmp_path):
    copy = _copy(tmp_path)

    def swap(data):
        v = data["model"]["vocab"]
        v["7"], v["8"] = v["8"], v["7"]

    _edit(copy / "tokenizer.json", swap)
    [problem] = _problems([f"teacher.path={copy}", "algo.teacher_coef=1"], through_preflight=True)
    assert problem.startswith(f"teacher.path='{copy}' has another tokenizer than model.path=")
    assert "'7' is token" in problem and "builtin:tiny-arith-teacher" in problem


def test_a_teacher_that_ends_answers_otherwise_is_refused_or_accepted(tmp_path):
    copy = _copy(tmp_path)
    _edit(copy / "generation_config.json", lambda d: d.update(eos_token_id=[2, 5]))
    [problem] = _problems([f"teacher.path={copy}", "algo.teacher_coef=1"])
    assert f"teacher.path='{copy}' ends its answers with token(s) [2, 5]" in problem
    assert "the student (model.path='builtin:tiny-arith') with [2]" in problem
    assert "length collapse" in problem and "teacher.allow_other_end_tokens=true" in problem
    accepted = [f"teacher.path={copy}", "algo.teacher_coef=1", "teacher.allow_other_end_tokens=1"]
    assert _problems(accepted) == []


def test_a_missing_or_unused_teacher_or_a_server_teacher_is_refused(tmp_path):
    [missing] = _problems([f"teacher.path={tmp_path / 'nope'}", "algo.teacher_coef=1"])
    assert missing.startswith(f"teacher.path='{tmp_path / 'nope'}' not found")
    assert "builtin:tiny-arith-teacher" in missing
    [unused] = _problems(["teacher.path=builtin:tiny-arith"])
    assert "algo.teacher_coef=0 (algo.name=grpo) gives it no term" in unused
    assert "algo.name=distill" in unused and "teacher=null" in unused
    [off] = _problems(
        ["teacher.path=builtin:tiny-arith", "algo.name=distill", "algo.teacher_coef=0"]
    )
    assert "Set algo.teacher_coef > 0 (the distill preset's 1.0), or teacher=null." in off
    overrides = [*DISTILL, "rollout.engine=server", "rollout.server_url=http://127.0.0.1:1"]
    cfg = load_config("tiny-arith", overrides)
    [server] = teacher_problems(cfg)
    assert server.startswith("teacher.engine=null takes rollout.engine='server'")
    assert "teacher.engine=vllm" in server
    assert teacher_problems(load_config("tiny-arith", [*overrides, "teacher.engine=hf"])) == []


def test_a_teacher_server_needs_its_url_and_a_server_that_answers(tmp_path):
    """``teacher.engine=server``: the URL required, read only with it, one replica, and a
    server that does not answer refused within the probe's 2 s, naming the key."""
    import socket

    [no_url] = _problems([*DISTILL, "teacher.engine=server"], through_preflight=True)
    assert no_url.startswith("teacher.engine=server needs teacher.server_url")
    assert "vllm serve 'builtin:tiny-arith'" in no_url
    [unread] = _problems([*DISTILL, "teacher.engine=hf", "teacher.server_url=http://x:8000"])
    assert unread.startswith("teacher.server_url='http://x:8000' is read only with")
    with socket.socket() as sock:  # a port nothing listens on: refused at once
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = [*DISTILL, "teacher.engine=server", f"teacher.server_url={url}"]
    t0 = time.perf_counter()
    problems = teacher_problems(load_config("tiny-arith", [*server, "teacher.replicas=2"]))
    assert time.perf_counter() - t0 < 2.5
    assert [p.split("=")[0] for p in problems] == ["teacher.replicas", "teacher.server_url"]
    assert f"GET {url}/v1/models did not answer within 2s" in problems[1]
    assert "ConnectionRefusedError" in problems[1] or "Connection refused" in problems[1]
    assert teacher_problems(load_config("tiny-arith", server), missing_ok=True) == []
    tcfg = teacher_run_config(load_config("tiny-arith", server))
    assert (tcfg.rollout.engine, tcfg.rollout.server_url, tcfg.rollout.replicas) == (
        "server",
        url,
        1,
    )


def test_prompt_logprobs_from_a_server_are_read_by_position():
    """A vLLM server's ``prompt_logprobs``: None at 0, then {id: {logprob, rank}} with the
    given token (ranked anywhere) and the top k; the top k come most likely first."""
    from grouprl.engines.server_engine import ServerEngine, ServerError

    engine = ServerEngine.__new__(ServerEngine)  # no server: the parsing alone
    engine.url, engine.key = "http://t:8000", "teacher.server_url"
    positions = [
        None,
        {
            "5": {"logprob": -3.0, "rank": 4},
            "9": {"logprob": -0.1, "rank": 1},
            "2": {"logprob": -2.5, "rank": 2},
        },
        {"7": {"logprob": -0.2, "rank": 1}, "4": {"logprob": -1.9, "rank": 2}},
    ]
    given, ids, lps = engine._given(positions, [1, 5, 7], 1, k=2)
    assert given == [-3.0, -0.2]
    assert ids == [[9, 2], [7, 4]] and lps == [[-0.1, -2.5], [-0.2, -1.9]]
    assert engine._given(positions, [1, 5, 7], 2, k=0) == ([-0.2], [], [])
    with pytest.raises(ServerError, match="position 2 are not of token 8"):
        engine._given(positions, [1, 5, 8], 1, k=0)
    with pytest.raises(ServerError, match=r"teacher.server_url=http://t:8000: .* for None of 3"):
        engine._given(None, [1, 5, 7], 1, k=0)


def test_the_plan_shows_the_teachers_engines_only_with_a_teacher():
    from grouprl.config.checks import derive
    from grouprl.plan.render import plan_sections

    cfg = load_config("tiny-arith", [*DISTILL, "teacher.engine=hf", "teacher.replicas=2"])
    sections = dict(plan_sections(cfg, derive(cfg)))
    rows = {quantity: (value, how) for quantity, value, how in sections["teacher"]}
    assert rows["model"][0] == "builtin:tiny-arith" and "never takes a push" in rows["model"][1]
    assert rows["engine"][0] == "hf" and "teacher.engine='hf'" in rows["engine"][1]
    assert rows["replicas"] == ("2", "teacher.replicas")
    assert rows["placement"][0] == "actors (CPU)"  # two replicas: Ray actors, as the rollout's
    on_gpu = [*DISTILL, "cluster.gpu=H100", "cluster.gpus_per_node=1", "train.device=cuda"]
    gpu = load_config("tiny-arith", on_gpu)
    rows = {q: (v, h) for q, v, h in dict(plan_sections(gpu, derive(gpu)))["teacher"]}
    assert "teacher.gpu_memory_utilization=0.2 x" in rows["engine memory per replica"][1]
    assert rows["replicas"][1] == "teacher.replicas=null: as many as the rollout's"
    served = [*DISTILL, "teacher.engine=server", "teacher.server_url=http://t:8000"]
    server = load_config("tiny-arith", served)
    rows = {q: (v, h) for q, v, h in dict(plan_sections(server, derive(server)))["teacher"]}
    assert (
        rows["engine"][0] == "server" and "http://t:8000 (teacher.server_url)" in rows["engine"][1]
    )
    assert rows["replicas"][0] == "1" and "pushed" not in rows["replicas"][1]
    plain = load_config("tiny-arith", [])
    assert "teacher" not in dict(plan_sections(plain, derive(plain)))


def test_callers_on_several_threads_take_turns(model, tokenizer, sequences):
    """Groups finishing in a stream may ask at once: an engine never serves two calls."""
    ids, starts = sequences
    engine = HFEngine(model, tokenizer, device="cpu")
    inside, most, score = 0, 0, engine.token_logprobs
    guard = threading.Lock()

    def one_at_a_time(i, s):
        nonlocal inside, most
        with guard:
            inside += 1
            most = max(most, inside)
        time.sleep(0.05)
        try:
            return score(i, s)
        finally:
            with guard:
                inside -= 1

    engine.token_logprobs = one_at_a_time
    teacher = Teacher(in_driver(engine))
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: teacher.token_logprobs(ids, starts), range(4)))
    teacher.close()
    assert most == 1 and all(r == results[0] for r in results)


def test_hf_scoring_batches_bound_the_logits_by_hand(monkeypatch):
    from grouprl.engines import hf_engine

    monkeypatch.setattr(hf_engine, "LOGITS_BUDGET", 100)
    # spans (len - start + 1): 5, 3, 2, 6; vocab 10: [5, 3] is 2 x 5 x 10 = 100 (fits),
    # [5, 3, 2] 150 (no); [2, 6] 2 x 6 x 10 = 120 (no)
    ids = [[0] * 9, [0] * 6, [0] * 3, [0] * 8]
    starts = [5, 4, 2, 3]
    batches = hf_engine._score_batches(ids, starts, vocab=10, max_rows=8)
    assert batches == [slice(0, 2), slice(2, 3), slice(3, 4)]
    assert hf_engine._score_batches(ids, starts, vocab=1, max_rows=3) == [slice(0, 3), slice(3, 4)]
    assert hf_engine._score_batches([[0] * 50], [1], vocab=10, max_rows=8) == [slice(0, 1)]
    assert hf_engine._score_batches([], [], vocab=10, max_rows=8) == []


class _TeacherServer:
    """A server on 127.0.0.1 that lists a model and answers scoring requests as asked:
    ``hang`` (never in time) or ``garbage`` (choices without prompt logprobs)."""

    def __init__(self, behaviour: str) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        release = self.release = threading.Event()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _send(self, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._send({"data": [{"id": "teacher"}]})

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                if behaviour == "hang":
                    release.wait(30)
                self._send({"choices": [{"index": 0, "text": "?"}]})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.mark.parametrize("behaviour", ["hang", "garbage"])
def test_a_teacher_server_that_hangs_or_answers_garbage_fails_the_call_in_time(
    behaviour, sequences
):
    """``teacher.timeout_s`` bounds a request; an answer without prompt logprobs is an
    error naming the key (the samples asked about then fail as reward errors:
    rollout/teacher_scores.py), never logprobs made up."""
    from grouprl.engines.server_engine import ServerEngine, ServerError

    ids, starts = sequences
    server = _TeacherServer(behaviour)
    try:
        engine = ServerEngine(
            server.url,
            model_dir=str(ASSETS_DIR / "tiny-arith"),
            dtype="float32",
            weights_dir="/dev/shm",
            timeout_s=0.5,
            key="teacher.server_url",
        )
        t0 = time.monotonic()
        with pytest.raises(ServerError) as caught:
            engine.token_logprobs(ids, starts)
        assert time.monotonic() - t0 < 3
        said = str(caught.value)
        assert said.startswith(f"teacher.server_url={server.url}: ")
        if behaviour == "hang":
            assert "timed out" in said
        else:
            assert "prompt logprobs for None of" in said
        engine.close()
    finally:
        server.close()
