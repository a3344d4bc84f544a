"""User code, held. At its face, user code by name (``UserCode``: a registered name or an
import path, resolved one way for rewards, environments and agents); behind it two wings:

    the worker pool: code you wrote (a reward, an    the program jail: a program a model
    env step, an agent) called in worker processes   wrote, run once in fresh namespaces
    (``WorkerPool``: pool, manager, slots, worker,   and a new root (``run_program``:
    isolation, seccomp, main_guard, failures)        program, watch, launcher)

    pool = WorkerPool(SandboxConfig(workers=2, memory_mb=4096), name="reward", network=False)
    pool.submit(fn, *args, deadline_s=5.0, **kwargs).result()  # value, or CallFailed

Both keep buggy code from costing more than its samples; neither is a boundary against
code written to attack the machine (docs/sandbox.md, docs/code.md: what each holds).
Names load on first use (PEP 562): a worker process imports only the pool's side.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grouprl.lazy import lazy_getattr

_NAMES = {
    "UserCode": ".user_code",
    "CallFailed": ".failures",
    "WorkerPool": ".pool",
    "worker_state": ".worker",
    "ProgramLimits": ".program",
    "ProgramResult": ".program",
    "run_program": ".program",
}
__all__ = [
    "CallFailed",
    "ProgramLimits",
    "ProgramResult",
    "UserCode",
    "WorkerPool",
    "run_program",
    "worker_state",
]
__getattr__ = lazy_getattr(__name__, _NAMES)

if TYPE_CHECKING:
    from grouprl.sandbox.failures import CallFailed
    from grouprl.sandbox.pool import WorkerPool
    from grouprl.sandbox.program import ProgramLimits, ProgramResult, run_program
    from grouprl.sandbox.user_code import UserCode
    from grouprl.sandbox.worker import worker_state
