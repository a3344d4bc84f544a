"""How user code is contained, shared by the `reward` and `env` sections: the `sandbox`
block, what becomes of a failed call (`on_error`), and the validators both sections run."""

from __future__ import annotations

import logging
from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from grouprl.config.renamed import renamed_to_new
from grouprl.config.section import Section

logger = logging.getLogger(__name__)


class SandboxConfig(Section):
    """How user code runs (reward functions, environments, agents): in worker processes
    (started with `spawn`), each call within a deadline and each worker within a memory
    limit, each worker killed with every process it started. A call that hangs, crashes or
    runs out of memory costs only its own sample or episode; its worker is replaced and
    the run goes on. Files are not isolated; the network is off where `reward.network` /
    `env.network` say so (docs/sandbox.md)."""

    workers: int = Field(default=2, ge=0)
    """Worker processes that run the code (calls for different samples or episodes run in
    parallel). 0 runs it in this process, uncontained and without deadlines (environments
    and agents only, for a debugger; reward functions always run in workers)."""
    memory_mb: int | None = Field(default=4096, ge=256)
    """Memory limit of each worker in MB, measured as `memory_limit` says: past it the
    worker and every process it started are killed (the calls fail as `memory`, the
    worker is replaced) instead of taking the machine's memory. null: none."""
    memory_limit: Literal["rss", "address_space"] = "rss"
    """`rss`: the resident memory of the worker's whole process tree, checked by a
    watchdog several times a second (threads and large virtual reservations cost nothing).
    `address_space`: `RLIMIT_AS` on each process, exact but counting reserved virtual
    memory too (450 idle threads, or CUDA's reservations, can exceed it)."""
    timeout_s: float = Field(default=10.0, gt=0)
    """Deadline of each call (a reward call; an environment's `start` or `step`): past it
    the worker is killed with its process tree and replaced, and the call fails (its
    sample, or its episode as `env_error`, fails as `on_error` says)."""
    require_isolation: bool = False
    """true: refuse to start (`grouprl plan` fails the check) where this machine cannot
    hold this code as asked: `network: false` without a user+network namespace or the
    filter that keeps the host's Unix sockets out; for `reward`, `code_tests` programs
    without their namespaces; for `env`, user code in this process (`workers: 0`).
    false: such a run starts, with a WARNING saying what is not enforced
    (docs/sandbox.md)."""


OnError = Literal["drop", "zero", "raise"]
"""What becomes of a sample or episode whose user code failed: the one definition."""

FAILED_SAMPLES = {
    "drop": "left out of training",
    "zero": "trained as score 0",
    "raise": "the run stops",
}
"""What becomes of a failed sample under each ``on_error``, for messages and `plan`."""


class Contained(Section):
    """A section that runs user code (``reward``, ``env``), with its own ``on_error``,
    ``failure_brake``, ``sandbox`` and ``network`` (defaults and text differ). Given from
    Python, its old keys move (a recipe's: the loader); ``on_error: abort`` is ``raise``;
    a ``sandbox`` given in part is filled from ``SANDBOX``."""

    SECTION: ClassVar[str]  # its key in the run config
    SANDBOX: ClassVar[SandboxConfig]  # its `sandbox` defaults
    IN_PROCESS: ClassVar[bool] = True  # whether `sandbox.workers: 0` (no workers) is allowed

    @classmethod
    def _shorthands(cls, data: dict[str, object]) -> dict[str, object]:
        return data  # the section's keys with their short forms written out

    @model_validator(mode="before")
    @classmethod
    def _old_keys(cls, data: object) -> object:
        if not isinstance(data, dict):
            return data
        data = cls._shorthands(dict(data))
        problems = renamed_to_new(
            data, prefix=cls.SECTION + ".", origin="a section given from Python"
        )
        if problems:
            raise ValueError("; ".join(problems))
        return data

    @field_validator("on_error", mode="before", check_fields=False)
    @classmethod
    def _on_error(cls, value: object) -> object:
        if value != "abort":
            return value
        key = f"{cls.SECTION}.on_error"
        logger.warning(f"{key}=abort is now {key}=raise")
        return "raise"

    @field_validator("sandbox", mode="before", check_fields=False)
    @classmethod
    def _sandbox_defaults(cls, value: object) -> object:
        if not isinstance(value, dict):
            return value
        if value.get("workers") == 0 and not cls.IN_PROCESS:
            raise ValueError(
                f"{cls.SECTION} functions always run in worker processes: set "
                f"{cls.SECTION}.sandbox.workers to 1 or more"
            )
        return {**cls.SANDBOX.model_dump(), **value}
