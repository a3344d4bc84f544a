"""A rollout engine on an OpenAI-compatible vLLM server started elsewhere: generation on
the server's GPUs (tensor parallel there), weight pushes into its running workers.

    generate ──► POST /v1/completions per prompt (token ids in, `return_token_ids`,
                 sampled-token logprobs, the prompt's seed and max_tokens) from a pool
                 of threads
    top_logprobs ──► POST /v1/completions per sequence with `prompt_logprobs` (a
                 distillation teacher on a server: ``teacher.engine=server``)
    stage_weights ──► safetensors in `rollout.server_weights_dir` (a path the server
                 reads: /dev/shm on its node, or a shared filesystem), while it generates
    apply_weights ──► POST /collective_rpc reload_weights (every server worker loads it
                 in place), then /reset_prefix_cache

With LoRA the server gets merged weights (``rollout.lora_push`` does not apply): it
loads a checkpoint-format file, so the merge happens on the pushing side.

Start the server with the dev endpoints and processed logprobs, for example:
    VLLM_SERVER_DEV_MODE=1 vllm serve MODEL --logprobs-mode processed_logprobs

Processed logprobs are what the other engines return (``engines/vllm_engine.py``).
vLLM's default, raw logprobs, ignores the temperature, so the first call that samples at
T != 1 or with top-k/top-p asks the server for one token's top logprobs at two
temperatures and refuses a server whose answers do not change (``_check_logprobs_mode``).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from torch import Tensor

from grouprl.device import DtypeName, resolve_dtype
from grouprl.engines.base import (
    NamedTensors,
    PushLedger,
    SamplingSettings,
    TopLogprobs,
    TwoStepPush,
    replicate,
)
from grouprl.engines.weights import (
    add_tied_lm_head,
    check_complete,
    expected_push,
    pack_for_transfer,
)
from grouprl.seeds import request_seed
from grouprl.types import Completion

RESET_TRIES = 40
RESET_WAIT_S = 0.25
PROBE_TEMPERATURES = (1.0, 2.0)
PROBE_TOP = 5
SERVE_HINT = "VLLM_SERVER_DEV_MODE=1 vllm serve MODEL --logprobs-mode processed_logprobs"
PLAIN_SAMPLING = {
    "repetition_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "min_p": 0.0,
}
"""Sent with every request: a vLLM server fills the sampling parameters a request leaves
out from the model's generation_config.json (Qwen2.5-Instruct's sets a repetition
penalty), which would change the distribution sampled from, and the processed logprobs,
in ways the trainer does not model."""


class ServerError(RuntimeError):
    """The server is unreachable or refused a request; the message says which and why."""

    user_error = True


class ServerEngine(TwoStepPush):
    def __init__(
        self,
        url: str,
        *,
        model_dir: str,
        dtype: DtypeName,
        weights_dir: str,
        timeout_s: float = 600.0,
        concurrency: int = 16,
        key: str = "rollout.server_url",
    ) -> None:
        """``key``: the config key that gave ``url``, which its errors name."""
        self.url, self.timeout_s, self.key = url.rstrip("/"), timeout_s, key
        self.weights_dir = weights_dir
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="rollout-server")
        models = self._request("GET", "/v1/models")["data"]
        self.model = models[0]["id"]
        self._dtype = resolve_dtype(dtype, torch.device("cpu"))  # what pushes are cast to
        self._expected, self._tied = expected_push(model_dir)
        self._mode_checked = False
        self._ledger = PushLedger("server")
        self._packed: dict[str, Tensor] = {}  # the staged push's tensors, until its last call
        self._directory: str | None = None  # the staged push's file, until it is applied

    def generate(
        self, prompts: list[list[int]], settings: SamplingSettings
    ) -> list[list[Completion]]:
        n = settings.group_size
        per_prompt = 1 if settings.is_greedy else n
        processing = settings.temperature != 1.0 or settings.top_k > 0 or settings.top_p < 1
        if prompts and not settings.is_greedy and processing and not self._mode_checked:
            self._check_logprobs_mode(prompts[0])
        max_tokens = settings.prompt_max_tokens(len(prompts))

        def one(i: int) -> list[Completion]:
            body = {
                "model": self.model,
                "prompt": list(prompts[i]),
                "n": per_prompt,
                "temperature": settings.temperature,
                "top_p": settings.top_p,
                "top_k": settings.top_k,
                "max_tokens": max_tokens[i],
                "ignore_eos": settings.ignore_eos,
                "seed": request_seed(settings.seed, i, n),
                "logprobs": 0,
                "return_token_ids": True,
                "skip_special_tokens": True,
                **PLAIN_SAMPLING,
            }
            choices = self._request("POST", "/v1/completions", body)["choices"]
            group = [_completion(c) for c in sorted(choices, key=lambda c: c["index"])]
            return group if per_prompt == n else replicate(group[0], n)

        return list(self._pool.map(one, range(len(prompts))))

    def token_logprobs(self, ids: list[list[int]], starts: list[int]) -> list[list[float]]:
        """``teacher.Teacher.token_logprobs`` on the server: ``top_logprobs`` with k = 0."""
        return [given for given, _, _ in self.top_logprobs(ids, starts, 0)]

    def top_logprobs(self, ids: list[list[int]], starts: list[int], k: int) -> list[TopLogprobs]:
        """``teacher.Teacher.top_logprobs`` on the server (``teacher.engine=server``): each
        sequence as a prompt with vLLM's ``prompt_logprobs=k`` (each position's given token
        and top k, from the raw logits at temperature 1, as the in-process engine's), one
        greedy token generated and dropped; a request per sequence, from the pool."""

        def one(i: int) -> TopLogprobs:
            body = {
                "model": self.model,
                "prompt": list(ids[i]),
                "max_tokens": 1,
                "temperature": 0.0,
                "prompt_logprobs": k,
                **PLAIN_SAMPLING,
            }
            [choice] = self._request("POST", "/v1/completions", body)["choices"]
            return self._given(choice.get("prompt_logprobs"), ids[i], starts[i], k=k)

        return list(self._pool.map(one, range(len(ids))))

    def _given(self, positions: Any, seq: list[int], start: int, *, k: int) -> TopLogprobs:
        """From a choice's ``prompt_logprobs`` (per position: None at 0, else {token id:
        {logprob, rank, ...}} holding the given token and the top k, ranked from 1), the
        logprob of ``seq[t]`` for t >= ``start`` and the top k's ids and logprobs there."""
        if not isinstance(positions, list) or len(positions) != len(seq):
            got = len(positions) if isinstance(positions, list) else None
            raise ServerError(
                f"{self.key}={self.url}: the server returned prompt logprobs for {got} of "
                f"{len(seq)} positions (a vLLM server answers `prompt_logprobs`; other "
                "servers cannot score a teacher's tokens)"
            )
        given: list[float] = []
        top_ids: list[list[int]] = []
        top_lps: list[list[float]] = []
        for t in range(start, len(seq)):
            entries = positions[t] or {}
            if str(seq[t]) not in entries:
                raise ServerError(
                    f"{self.key}={self.url}: the server's prompt logprobs at position {t} "
                    f"are not of token {seq[t]}"
                )
            given.append(float(entries[str(seq[t])]["logprob"]))
            if k > 0:
                # most likely first; the given token is among them only when ranked in
                ranked = sorted(entries.items(), key=lambda e: e[1]["rank"])[:k]
                top_ids.append([int(token) for token, _ in ranked])
                top_lps.append([float(e["logprob"]) for _, e in ranked])
        return given, top_ids, top_lps

    def _stage(
        self, named_tensors: NamedTensors, *, version: int, last: bool, lora_scaling: float | None
    ) -> None:
        """Packs the weights (cast to the engine's dtype) and, at the push's ``last`` call,
        writes them where the server reads them; all or nothing (a partial push raises
        before the server sees it). The server keeps generating meanwhile."""
        merged = self._merged(named_tensors, version=version, last=last, lora_scaling=lora_scaling)
        try:
            with self._ledger.stage(version, last=last) as new:
                if new:
                    self._discard_staged()
                for name, tensor in pack_for_transfer(merged, dtype=self._dtype).items():
                    self._ledger.add(name, tuple(tensor.shape))
                    self._packed[name] = tensor
                if last:
                    self._write_packed()
        except BaseException:
            self._discard_staged()
            raise

    def _write_packed(self) -> None:
        """The whole push, checked, as a file where the server reads it."""
        add_tied_lm_head(self._packed, tie_word_embeddings=self._tied)
        shapes = {n: tuple(t.shape) for n, t in self._packed.items()}
        check_complete(shapes, self._expected, engine="server")
        Path(self.weights_dir).mkdir(parents=True, exist_ok=True)
        self._directory = tempfile.mkdtemp(prefix="grouprl-weights-", dir=self.weights_dir)
        save_file(self._packed, str(Path(self._directory, "model.safetensors")))
        self._packed = {}

    def apply_weights(self, version: int, *, nbytes: int = 0) -> None:
        """Has every server worker load the staged file in place, then resets the prefix
        cache."""
        self._ledger.take(version)
        try:
            self._request(
                "POST",
                "/collective_rpc",
                {
                    "method": "reload_weights",
                    "kwargs": {"weights_path": self._directory, "is_checkpoint_format": True},
                },
            )
        finally:
            self._discard_staged()
        self._reset_prefix_cache()
        self._version = version

    def _discard_staged(self) -> None:
        """Forget a staged push: its packed tensors and its file."""
        self._packed = {}
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
            self._directory = None

    def _check_logprobs_mode(self, prompt: list[int]) -> None:
        """Raises ``ServerError`` if the server's logprobs ignore the temperature (it was
        started with raw logprobs): one token's top logprobs at two temperatures."""
        tops = []
        for temperature in PROBE_TEMPERATURES:
            body = {
                "model": self.model,
                "prompt": list(prompt),
                "max_tokens": 1,
                "temperature": temperature,
                "seed": 0,
                "logprobs": PROBE_TOP,
                **PLAIN_SAMPLING,
            }
            choice = self._request("POST", "/v1/completions", body)["choices"][0]
            tops.append(((choice.get("logprobs") or {}).get("top_logprobs") or [{}])[0])
        if not logprobs_follow_temperature(*tops):
            raise ServerError(
                f"{self.key}={self.url}: the server's logprobs do not change with "
                f"the temperature (top-{PROBE_TOP} logprobs of one token at temperatures "
                f"{PROBE_TEMPERATURES[0]:g} and {PROBE_TEMPERATURES[1]:g}): it runs with "
                "raw logprobs, while the trainer scores tokens at rollout.temperature. "
                f"Restart it with --logprobs-mode processed_logprobs ({SERVE_HINT})"
            )
        self._mode_checked = True

    def _reset_prefix_cache(self) -> None:
        """Cached prompt prefixes hold the old weights' keys and values. The server refuses
        while blocks are held (another client's running requests): retried for a while."""
        for _ in range(RESET_TRIES):
            if self._request("POST", "/reset_prefix_cache").get("success"):
                return
            time.sleep(RESET_WAIT_S)
        raise ServerError(
            f"{self.key}={self.url}: the server kept refusing to reset its prefix "
            f"cache after a weight push ({RESET_TRIES} tries over "
            f"{RESET_TRIES * RESET_WAIT_S:.0f} s: requests held its KV blocks); stop other "
            "clients' requests during training or give the run a server of its own"
        )

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._discard_staged()

    def _request(self, method: str, path: str, body: dict | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                text = response.read()
        except urllib.error.HTTPError as err:
            detail = err.read().decode(errors="replace")[:500]
            hint = (
                " (start the server with VLLM_SERVER_DEV_MODE=1 for weight pushes)"
                if path in ("/collective_rpc", "/reset_prefix_cache") and err.code == 404
                else ""
            )
            raise ServerError(
                f"{self.key}={self.url}: {method} {path} answered {err.code}: {detail}{hint}"
            ) from None
        except (urllib.error.URLError, OSError) as err:
            raise ServerError(
                f"{self.key}={self.url}: cannot reach the server ({err}); start it "
                f"({SERVE_HINT}) or fix the URL"
            ) from None
        return json.loads(text) if text else None


def logprobs_follow_temperature(top_a: dict[str, float], top_b: dict[str, float]) -> bool:
    """Whether two answers' top logprobs for the same token position, sampled at two
    temperatures, differ: processed logprobs flatten at the higher temperature (the
    top-ranked token loses, the fifth gains, typically by nats), raw ones are the same
    forward pass's (equal to rounding). An answer without top logprobs counts as raw."""
    # the sampled token joins the top list when it is not in it: compare the top ranks
    k = min(len(top_a), len(top_b))
    if k == 0:
        return False
    a, b = sorted(top_a.values(), reverse=True)[:k], sorted(top_b.values(), reverse=True)[:k]
    return max(abs(x - y) for x, y in zip(a, b, strict=True)) > 1e-2


def _completion(choice: dict[str, Any]) -> Completion:
    token_ids = choice.get("token_ids")
    logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
    if token_ids is None or logprobs is None or len(logprobs) != len(token_ids):
        raise ServerError(
            "the server's completion lacks token ids or sampled-token logprobs (a vLLM "
            "server answers `return_token_ids` and `logprobs`; other servers cannot be used)"
        )
    if choice.get("finish_reason") not in ("stop", "length"):
        raise ServerError(f"the server finished a completion with {choice.get('finish_reason')}")
    return Completion(
        token_ids=list(token_ids),
        logprobs=[float(x) for x in logprobs],
        finish_reason=choice["finish_reason"],
        text=choice.get("text", ""),
    )
