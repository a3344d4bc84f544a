"""Model and optimizer tensors as torch distributed checkpoint (DCP) shards.

Every rank writes its own shards of ``{"model": ..., "optimizer": ..., "critic": ...,
"critic_optimizer": ...}`` (state dicts keyed by parameter names, so DTensor shards
of FSDP2 and plain tensors alike); loading reshards, so a checkpoint written by 2
workers loads on 1 and back.

DCP's metadata file is a pickle. It is read here with an unpickler that only builds
DCP's own metadata records, torch sizes, dtypes and layouts, and paths: a crafted
checkpoint cannot run code. Tensor payloads are read by DCP with ``weights_only``.
"""

from __future__ import annotations

import io
import pickle
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

from grouprl.ckpt.state import CheckpointError

_ALLOWED = {
    "torch.distributed.checkpoint.metadata": None,  # any of DCP's metadata records
    "torch.distributed.checkpoint.filesystem": {"_StorageInfo"},
    "torch.serialization": {"_get_layout"},
    "torch": {"Size"},
    "pathlib": {"PosixPath", "PurePosixPath", "WindowsPath", "PureWindowsPath"},
    "collections": {"OrderedDict"},
}


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        allowed = _ALLOWED.get(module, set())
        is_dtype = module == "torch" and isinstance(getattr(torch, name, None), torch.dtype)
        if (module in _ALLOWED and allowed is None) or name in allowed or is_dtype:
            return super().find_class(module, name)
        raise CheckpointError(
            f"DCP metadata refers to {module}.{name}, which a checkpoint never needs; the "
            "file was not written by torch.distributed.checkpoint (refusing to load it)"
        )


METADATA = ".metadata"
"""DCP's metadata file in a shards directory (written by rank 0)."""


def parse_metadata(data: bytes, *, where: str) -> Metadata:
    """DCP metadata from the bytes of its file, built only from DCP's own records."""
    metadata = _MetadataUnpickler(io.BytesIO(data)).load()
    if not isinstance(metadata, Metadata):
        raise CheckpointError(f"{where}: DCP metadata holds a {type(metadata).__name__}")
    return metadata


class SafeReader(FileSystemReader):
    """DCP's file reader, with the metadata pickle restricted to DCP's own records."""

    def read_metadata(self, *args: object, rank: int | None = None, **kwargs: object) -> Metadata:
        path = self._get_metadata_path(rank)
        with open(path, "rb") as f:
            metadata = parse_metadata(f.read(), where=str(self.path))
        if metadata.storage_meta is None:  # the class default, for a pickle without one
            metadata.storage_meta = StorageMeta()
        assert metadata.storage_meta is not None
        metadata.storage_meta.load_id = self.load_id
        return metadata


# a single process without torch.distributed is the normal case here, not a surprise
# (set once: saves run on a background thread, where catch_warnings is not safe)
warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)


def save_shards(state: dict[str, Any], out: Path, *, process_group=None) -> None:
    """Writes ``state`` (nested dicts of tensors and plain values) as DCP shards."""
    dcp.save(state, storage_writer=FileSystemWriter(out), process_group=process_group)


def load_shards(state: dict[str, Any], src: Path, *, process_group=None) -> None:
    """Fills ``state`` in place (its tensors give the shapes and shardings wanted)."""
    reader = SafeReader(src)
    reader.read_metadata()  # refuses a crafted pickle with its own message, before DCP does
    dcp.load(state, storage_reader=reader, process_group=process_group)


def files_needed(state: dict[str, Any], metadata: Metadata) -> set[str]:
    """The shard files a rank reads to fill ``state`` (its own tensors, as for
    ``load_shards``): DCP's load plan for this rank, mapped to files. Not only the files
    the rank wrote: a tensor every rank holds is saved once, by any one of them."""
    planner = DefaultLoadPlanner()
    planner.set_up_planner(state, metadata, is_coordinator=False)
    plan = planner.create_local_plan()
    return {metadata.storage_data[item.storage_index].relative_path for item in plan.items}


def shard_parts(src: Path) -> set[str]:
    """The top-level parts the shards hold (``model``, ``optimizer``, ``critic``, ...)."""
    metadata = SafeReader(src).read_metadata()
    return {key.split(".", 1)[0] for key in metadata.state_dict_metadata}
