"""Weight pushes through one shared-memory buffer that the engine's workers map once.

    engine start:  SharedWeights(expected names and shapes, engine dtype)
                     │ one file, every weight at a fixed offset, space reserved up front
                     │ collective_rpc("grouprl_attach_weights", path, layout) ──► each worker
                     │ maps the same file; then the path is unlinked (the mappings stay)
                     ▼
    each push:     fill(named_tensors): copy_ (with the cast) into the views; names and
                     │ shapes checked against the checkpoint, all or nothing
                     │ collective_rpc("grouprl_load_weights") ──► each worker hands its
                     │ views to vLLM's own in-place reload (``reload_weights`` with a
                     ▼ weights iterator: fused and sharded layouts are vLLM's business)

This replaces writing a safetensors file per push, reading it back in the worker and
removing it. The buffer stays for the engine's life: it costs host memory of one copy
of the weights in the engine's dtype, in /dev/shm when that has room, else in a file
under the temp dir (page cache). Space is reserved with ``posix_fallocate`` before the
file is mapped: a tmpfs that is too small fails here, cleanly, and never later as a
SIGBUS on a write into a page it could not back.

``WorkerExtension`` is mixed into vLLM's worker class (``worker_extension_cls``); it
runs in the worker process and imports nothing of grouprl's beyond this module.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable, Iterable

import torch
from torch import Tensor

from grouprl.engines.weights import check_complete

ALIGN = 64
"""Byte alignment of each tensor in the buffer (a cache line; vector loads stay aligned)."""

Layout = list[tuple[str, str, list[int], int]]
"""(name, dtype name, shape, byte offset) of each tensor in the buffer."""


def plan_layout(expected: dict[str, tuple[int, ...]], dtype: torch.dtype) -> tuple[Layout, int]:
    """Offsets of every expected tensor (in name order) and the buffer's size in bytes."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    dtype_name = str(dtype).removeprefix("torch.")
    layout: Layout = []
    offset = 0
    for name in sorted(expected):
        shape = list(expected[name])
        layout.append((name, dtype_name, shape, offset))
        nbytes = itemsize * math.prod(shape)
        offset += -(-nbytes // ALIGN) * ALIGN
    return layout, max(offset, ALIGN)


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
        self.layout, self.size = plan_layout(expected, dtype)
        self.path: str | None = reserve_file(self.size, prefix="grouprl-push-")
        self.views = map_layout(self.path, self.layout, self.size)

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
        for name, tensor in named_tensors:
            if name in got:
                raise ValueError(f"weight {name!r} given twice")
            got[name] = tuple(tensor.shape)
            view = self.views.get(name)
            if view is not None and tuple(view.shape) == got[name]:
                view.copy_(tensor.detach())
        if self.tied and "lm_head.weight" not in got and "model.embed_tokens.weight" in got:
            self.views["lm_head.weight"].copy_(self.views["model.embed_tokens.weight"])
            got["lm_head.weight"] = got["model.embed_tokens.weight"]
        check_complete(got, self.expected, engine=self.engine)


class WorkerExtension:
    """Methods mixed into each vLLM worker: map the push buffer, load from it in place."""

    reload_weights: Callable[..., None]  # the vLLM worker's own method

    def grouprl_attach_weights(self, path: str, layout: Layout, size: int) -> int:
        self._grouprl_views = map_layout(path, layout, size)
        return len(self._grouprl_views)

    def grouprl_load_weights(self) -> None:
        # the worker's reload_weights: vLLM's layer-wise in-place reload, from our views
        self.reload_weights(
            weights_iterator=iter(list(self._grouprl_views.items())), is_checkpoint_format=True
        )
