"""Contained user code: a pool of worker processes for rewards, environment steps and
agents, each call within a deadline, each worker within a memory limit.

    pool = WorkerPool(size=2, memory_mb=4096, concurrency=1, name="reward", network=False)
    pool.submit(fn, *args, deadline_s=5.0, **kwargs).result()  # value, or CallFailed

Bounded: time per call (the worker is killed past it); memory (resident memory of the
worker's process tree by default, or address space); processes (a killed worker takes
its whole tree: it leads its own process group and adopts orphans as a subreaper); the
parent's life (PR_SET_PDEATHSIG); the network when off (an own user+network namespace and
a seccomp filter that refuses Unix sockets, so the host's path-named ones too, where the
kernel allows it). Not contained: the filesystem (the code reads and writes
what your user can), your other processes, CPU share, the GPU, the network when on. It
keeps buggy code from costing more than its samples; it is no boundary against code
written to attack the machine. docs/sandbox.md has the details and the measured cost.
"""

from grouprl.sandbox.failures import CallFailed
from grouprl.sandbox.pool import WorkerPool
from grouprl.sandbox.worker import worker_state

__all__ = ["CallFailed", "WorkerPool", "worker_state"]
