"""Device and dtype resolution: the one place that decides where tensors live.

``auto`` means CUDA when a GPU is visible, else CPU; the ``auto`` dtype is
float32 on CPU and bfloat16 on CUDA. The dtype is what training passes compute in: the
weights and optimizer states stay float32, cast per layer by FSDP2 on several ranks
(``workers/fsdp.py``) and by ``torch.autocast`` on one (``autocast_for``).
``model.dtype=bfloat16`` on CPU computes in bf16 too: faster than float32 on CPUs with
bf16 matrix units (Intel AMX; 1.9x per step for a 24M model), slower on CPUs without
them, so ``auto`` never picks it there.
"""

from __future__ import annotations

from typing import Literal

import torch

DeviceName = Literal["auto", "cpu", "cuda"]
DtypeName = Literal["auto", "float32", "bfloat16", "float16"]

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class DeviceError(ValueError):
    """A device or dtype the user asked for that this machine cannot give."""

    user_error = True


def resolve_device(name: DeviceName = "auto") -> torch.device:
    """``auto`` -> ``cuda`` if available else ``cpu``; ``cuda`` without a GPU is a user error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise DeviceError(
            "train.device='cuda' but torch sees no CUDA GPU (torch "
            f"{torch.__version__}); use train.device=cpu or train.device=auto, "
            "or install a CUDA build of torch (the `gpu` extra)"
        )
    if name not in ("cpu", "cuda"):
        raise DeviceError(f"train.device={name!r} is not one of 'auto', 'cpu', 'cuda'")
    return torch.device(name)


def resolve_dtype(name: DtypeName, device: torch.device) -> torch.dtype:
    """``auto`` -> float32 on CPU, bfloat16 on CUDA; otherwise the named dtype."""
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if name not in _DTYPES:
        raise DeviceError(
            f"model.dtype={name!r} is not one of 'auto', {', '.join(map(repr, _DTYPES))}"
        )
    return _DTYPES[name]


def dtype_name(dtype: torch.dtype) -> DtypeName:
    """``torch.bfloat16`` -> ``"bfloat16"`` (the spelling vLLM and the config use), for
    the dtypes ``resolve_dtype`` gives."""
    names: dict[torch.dtype, DtypeName] = {
        torch.float32: "float32",
        torch.bfloat16: "bfloat16",
        torch.float16: "float16",
    }
    return names[dtype]


def autocast_for(device: torch.device, dtype: torch.dtype):
    """A no-argument context factory: mixed precision in ``dtype`` when it is 16-bit (the
    weights and optimizer states stay float32), nothing when it is float32. For a model
    that is not sharded: over FSDP2's gathers, autocast's cache of casts would hold a
    16-bit copy of every layer (``workers/common.autocast`` picks)."""
    import functools

    if dtype != torch.float32:
        return functools.partial(torch.autocast, device_type=device.type, dtype=dtype)
    return functools.partial(torch.autocast, device_type=device.type, enabled=False)
