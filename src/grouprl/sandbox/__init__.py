"""Contained user code: a pool of worker processes with a deadline per call and an
address-space limit per process (rewards, environment steps, agents).

    pool = WorkerPool(size=2, memory_mb=4096, concurrency=1, name="reward")
    pool.submit(fn, *args, deadline_s=5.0, **kwargs).result()  # value, or CallFailed
"""

from grouprl.sandbox.failures import CallFailed
from grouprl.sandbox.pool import WorkerPool
from grouprl.sandbox.worker import worker_state

__all__ = ["CallFailed", "WorkerPool", "worker_state"]
