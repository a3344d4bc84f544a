"""Which rows each training step uses: a seeded, resumable walk over epochs.

Epoch ``e`` visits the rows in the order ``permutation(seed, e)`` (or in
order when ``shuffle`` is off). Batches run across epoch boundaries: a batch
may take the last rows of epoch ``e`` and the first of epoch ``e + 1``, so
every row is used exactly once per epoch and no row is dropped. The state is
just ``(epoch, position)``; restoring it replays exactly the batches an
uninterrupted run would have drawn::

    order:   epoch 0: 3 0 4 1 2   epoch 1: 4 2 0 1 3     (5 rows, batch_size 3)
    batches: [3 0 4] [1 2 | 4] [2 0 1] [3 | ...
"""

from __future__ import annotations

from typing import Any

import numpy as np

from grouprl.data.sources import DataError


class PromptSampler:
    """Row positions for each step, reshuffled every epoch from ``(seed, epoch)``."""

    def __init__(self, num_rows: int, *, seed: int, shuffle: bool = True) -> None:
        if num_rows < 1:
            raise ValueError("PromptSampler needs at least one row")
        self.num_rows = num_rows
        self.seed = seed
        self.shuffle = shuffle
        self._epoch = 0
        self._position = 0
        self._order = self._epoch_order(0)

    @property
    def epoch(self) -> int:
        """Completed passes over the rows (the epoch the next row comes from)."""
        return self._epoch

    def next_batch(self, batch_size: int) -> list[int]:
        """The next ``batch_size`` row positions, continuing into the next epoch as needed."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        batch: list[int] = []
        while len(batch) < batch_size:
            take = min(batch_size - len(batch), self.num_rows - self._position)
            batch.extend(int(i) for i in self._order[self._position : self._position + take])
            self._position += take
            if self._position == self.num_rows:
                self._epoch += 1
                self._position = 0
                self._order = self._epoch_order(self._epoch)
        return batch

    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch": self._epoch,
            "position": self._position,
            "seed": self.seed,
            "num_rows": self.num_rows,
            "shuffle": self.shuffle,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state``; refuses a state saved over different data or seed.

        Resuming over a changed dataset would silently skip or repeat rows.
        """
        mine = self.state_dict()
        for key in ("num_rows", "seed", "shuffle"):
            if key in state and state[key] != mine[key]:
                raise DataError(
                    f"the checkpoint's data sampler had {key}={state[key]!r} but this run has "
                    f"{key}={mine[key]!r}; resume with the same data.train, train.seed "
                    "and data.shuffle as the original run, or start a new run"
                )
        position = int(state["position"])
        if not 0 <= position < self.num_rows:
            raise ValueError(f"sampler position {position} is outside 0..{self.num_rows - 1}")
        self._epoch = int(state["epoch"])
        self._position = position
        self._order = self._epoch_order(self._epoch)

    def _epoch_order(self, epoch: int) -> np.ndarray:
        if not self.shuffle:
            return np.arange(self.num_rows)
        # numpy seeds must be non-negative; map any int seed onto 64 bits.
        return np.random.default_rng([self.seed % 2**64, epoch]).permutation(self.num_rows)
