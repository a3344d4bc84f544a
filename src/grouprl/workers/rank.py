"""What a role knows of its place in the worker group, and how ranks split a batch.

Every rank receives the whole batch and works on its own rows: each mini-batch is cut
into ``world_size`` equal contiguous blocks and rank r takes block r. Loss
denominators come from the whole mini-batch (every rank can count them), so the
ranks' summed gradients equal one process's gradient over the mini-batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Rank:
    rank: int = 0
    world_size: int = 1
    device: str = "cpu"

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def block(self, rows: int) -> slice:
        """This rank's contiguous share of ``rows`` rows (``rows`` divides evenly)."""
        assert rows % self.world_size == 0, f"{rows} rows over {self.world_size} ranks"
        size = rows // self.world_size
        return slice(self.rank * size, (self.rank + 1) * size)

    def rows(self, rows: int, *, mini_batch_size: int) -> torch.Tensor:
        """The row indices this rank trains on: its block of every mini-batch."""
        blocks = [
            torch.arange(start, min(start + mini_batch_size, rows))[
                self.block(min(mini_batch_size, rows - start))
            ]
            for start in range(0, rows, mini_batch_size)
        ]
        return torch.cat(blocks)


SINGLE = Rank()
"""The only rank of a one-process run."""


def join_process_group(
    *, rank: int, world_size: int, init_method: str, backend: str, timeout_s: float
) -> None:
    """Joins the default process group; a collective waiting longer than ``timeout_s``
    (a dead peer) raises instead of hanging."""
    dist.init_process_group(
        backend,
        init_method=init_method,
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=timeout_s),
    )


def all_sum(values: dict[str, float]) -> dict[str, float]:
    """Sums ``values`` over the ranks; every rank passes the same keys."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return values
    names = sorted(values)
    summed = torch.tensor([values[k] for k in names], dtype=torch.float64)
    dist.all_reduce(summed)
    return dict(zip(names, summed.tolist(), strict=True))


def all_max(value: float, device: str = "cpu") -> float:
    """The largest ``value`` over the ranks (in float64, exact for counts), reduced on
    ``device`` (the rank's: NCCL reduces GPU tensors)."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return value
    top = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(top, op=dist.ReduceOp.MAX)
    return float(top.item())


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]
