"""Loading the policy (and reference) model and tokenizer exactly as transformers does."""

from __future__ import annotations

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from grouprl.assets import resolve_model_path
from grouprl.config.model_data import ModelConfig


class ModelLoadError(RuntimeError):
    user_error = True


def load_tokenizer(cfg: ModelConfig) -> PreTrainedTokenizerBase:
    path = resolve_model_path(cfg.path)
    try:
        tok = AutoTokenizer.from_pretrained(
            path, trust_remote_code=cfg.trust_remote_code, revision=cfg.revision
        )
    except OSError as err:
        raise ModelLoadError(
            f"model.path={cfg.path!r}: the tokenizer could not be loaded ({err}). Give a local "
            "model directory, a hub name reachable from this machine, or builtin:tiny-arith."
        ) from None
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def load_causal_lm(
    cfg: ModelConfig, *, dtype: torch.dtype, device: torch.device, weights: bool = True
) -> PreTrainedModel:
    """The model with its weights, or (``weights=False``) its structure on the meta
    device, to be filled from another rank."""
    path = resolve_model_path(cfg.path)
    kwargs = {"trust_remote_code": cfg.trust_remote_code, "revision": cfg.revision}
    try:
        if not weights:
            config = AutoConfig.from_pretrained(path, **kwargs)
            with torch.device("meta"):
                return AutoModelForCausalLM.from_config(
                    config, dtype=dtype, trust_remote_code=cfg.trust_remote_code
                )
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, **kwargs)
    except OSError as err:
        raise ModelLoadError(
            f"model.path={cfg.path!r}: the model could not be loaded ({err}). Give a local "
            "model directory, a hub name reachable from this machine, or builtin:tiny-arith."
        ) from None
    # transformers wraps PreTrainedModel.to with functools.wraps, which pyright cannot bind
    return model.to(device)  # pyright: ignore[reportArgumentType]
