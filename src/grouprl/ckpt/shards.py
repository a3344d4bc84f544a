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

import pickle
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
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


class SafeReader(FileSystemReader):
    """DCP's file reader, with the metadata pickle restricted to DCP's own records."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        rank = kwargs.get("rank")
        with open(self._get_metadata_path(rank), "rb") as f:
            metadata = _MetadataUnpickler(f).load()
        if not isinstance(metadata, Metadata):
            raise CheckpointError(f"{self.path}: DCP metadata holds a {type(metadata).__name__}")
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
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


def shard_parts(src: Path) -> set[str]:
    """The top-level parts the shards hold (``model``, ``optimizer``, ``critic``, ...)."""
    metadata = SafeReader(src).read_metadata()
    return {key.split(".", 1)[0] for key in metadata.state_dict_metadata}
