"""What a step costs the hardware: memory per rank, tokens per second, model FLOPs
utilization (MFU).

Model FLOPs of one forward and backward pass over a batch, the convention of MFU
(useful work over real tokens; padding, recomputation and the masked half of attention
are not counted):

    6 x N x tokens                N: the decoder layers' matmul weights (q, k, v, o,
                                  gate, up, down); forward 2N per token, backward 4N
  + 6 x V x d x scored tokens     the LM head runs only where a token is scored
  + 6 x T_b^2 x d x L per row b   causal attention: QK^T and AV are 4 T^2 d in the
                                  forward, half of it under the causal mask, and the
                                  backward twice the forward

MFU = those FLOPs / (seconds x devices x the device's peak). A GPU's peak is its dense
tensor-core rate in the compute dtype (``PEAK_TFLOPS``, by the name CUDA reports); on a
CPU it is the rate of a dense matmul in the compute dtype measured once per process with
the rank's threads (as ``benchmarks/train_flops.py``), so CPU MFU reads "fraction of
what a plain matmul reaches here".
"""

from __future__ import annotations

import functools
import re
import resource
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

GiB = 1024**3

PEAK_TFLOPS: tuple[tuple[str, dict[str, float]], ...] = (
    # (name fragment, dense TFLOP/s by compute dtype), the datasheets' figures without
    # sparsity; fp32 is the plain (non-TF32) rate. The first fragment found as a word
    # of the reported name wins, so the PCIe variants come before their SXM names.
    ("H100 PCIe", {"bfloat16": 756.0, "float16": 756.0, "float32": 51.0}),
    ("H100", {"bfloat16": 989.0, "float16": 989.0, "float32": 67.0}),
    ("H200", {"bfloat16": 989.0, "float16": 989.0, "float32": 67.0}),
    ("H20", {"bfloat16": 148.0, "float16": 148.0, "float32": 44.0}),
    ("B200", {"bfloat16": 2250.0, "float16": 2250.0, "float32": 80.0}),
    ("A100", {"bfloat16": 312.0, "float16": 312.0, "float32": 19.5}),
    ("L40S", {"bfloat16": 362.0, "float16": 362.0, "float32": 91.6}),
    ("L4", {"bfloat16": 121.0, "float16": 121.0, "float32": 30.3}),
    ("MI300X", {"bfloat16": 1307.0, "float16": 1307.0, "float32": 163.4}),
)


@dataclass(frozen=True)
class ModelShape:
    """What the model FLOPs of a pass depend on."""

    matmul_weights: int  # N
    vocab: int  # V
    hidden: int  # d
    layers: int  # L

    @classmethod
    def of(cls, model: PreTrainedModel) -> ModelShape:
        names = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
        weights = sum(
            p.numel()
            for name, p in model.named_parameters()
            if name.endswith(".weight") and any(f".{n}." in name for n in names)
        )
        cfg = model.config
        return cls(weights, cfg.vocab_size, cfg.hidden_size, cfg.num_hidden_layers)


@dataclass(frozen=True)
class Hardware:
    """A training rank's model and device, as MFU needs them (the same on every rank)."""

    shape: ModelShape
    peak_flops: float  # of one device, in the compute dtype
    peak_source: str  # where that figure comes from, for the log


@dataclass(frozen=True)
class ModelFlops:
    """Model FLOPs of one forward and backward pass, by term (see the module docstring)."""

    weights: float
    head: float
    attention: float

    @property
    def total(self) -> float:
        return self.weights + self.head + self.attention


def pass_flops(
    shape: ModelShape, attention_mask_BT: torch.Tensor, loss_mask_BT: torch.Tensor
) -> ModelFlops:
    """Model FLOPs of one forward and backward pass over a batch's real tokens."""
    lengths_B = attention_mask_BT.sum(dim=1).double()
    scored_BT = loss_mask_BT.bool().clone()
    scored_BT[:, 0] = False  # nothing predicts a row's first token
    d = shape.hidden
    return ModelFlops(
        weights=6.0 * shape.matmul_weights * float(lengths_B.sum()),
        head=6.0 * shape.vocab * d * float(scored_BT.sum()),
        attention=6.0 * float((lengths_B**2).sum()) * d * shape.layers,
    )


def peak_flops(device: torch.device, dtype: torch.dtype) -> tuple[float, str]:
    """(FLOP/s, where the figure comes from) of one device in ``dtype``."""
    import torch

    name = str(dtype).removeprefix("torch.")
    if device.type == "cuda":
        gpu = torch.cuda.get_device_name(device)
        tflops = datasheet_tflops(gpu, name)
        if tflops is None:
            return float("nan"), f"{gpu}: not in grouprl.metrics.telemetry.PEAK_TFLOPS"
        return tflops * 1e12, f"{gpu} datasheet, dense {name}"
    return measured_matmul_rate(dtype, torch.get_num_threads()), f"measured {name} matmul"


def datasheet_tflops(gpu: str, dtype: str) -> float | None:
    """Dense TFLOP/s of the GPU CUDA calls ``gpu`` in ``dtype``, if the table has it."""
    for fragment, rates in PEAK_TFLOPS:
        if re.search(rf"\b{re.escape(fragment)}\b", gpu):
            return rates.get(dtype)
    return None


@functools.cache
def measured_matmul_rate(dtype: torch.dtype, threads: int, side: int = 1024) -> float:
    """FLOP/s of a dense ``side``-square matmul on the CPU, best of three (~0.1 s)."""
    import torch

    a, b = torch.randn(side, side, dtype=dtype), torch.randn(side, side, dtype=dtype)
    torch.mm(a, b)  # the first call allocates
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - started)
    return 2.0 * side**3 / best


def memory_now(device: torch.device) -> dict[str, float]:
    """This process's memory in GiB, peaks since the last call (then reset): the caching
    allocator's allocated and reserved bytes on a GPU; resident host memory on a CPU."""
    import torch

    if device.type == "cuda":
        out = {
            "peak_allocated_gib": torch.cuda.max_memory_allocated(device) / GiB,
            "peak_reserved_gib": torch.cuda.max_memory_reserved(device) / GiB,
            "allocated_gib": torch.cuda.memory_allocated(device) / GiB,
            "reserved_gib": torch.cuda.memory_reserved(device) / GiB,
        }
        torch.cuda.reset_peak_memory_stats(device)
        return out
    rss = host_rss()  # the kernel updates the peak lazily: it may lag the current figure
    return {"host_rss_gib": rss / GiB, "host_peak_rss_gib": max(rss, host_peak_rss()) / GiB}


def host_rss() -> int:
    """Resident bytes of this process now."""
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[1])
    except OSError:  # not Linux: the peak is the best figure there is
        return host_peak_rss()
    return pages * resource.getpagesize()


def host_peak_rss() -> int:
    """Peak resident bytes of this process (since it started)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def rank_memory_metrics(per_rank: list[dict[str, float]]) -> dict[str, float]:
    """``memory/<name>`` as the largest over the ranks, and with more than one rank each
    rank's own as ``memory/rank_K/<name>``."""
    out = {f"memory/{name}": max(m[name] for m in per_rank) for name in per_rank[0]}
    if len(per_rank) > 1:
        for k, m in enumerate(per_rank):
            out.update({f"memory/rank_{k}/{name}": value for name, value in m.items()})
    return out
