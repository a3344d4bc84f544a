"""The `checkpoint` section and its tiers (memory, disk, S3). Imports no torch."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from grouprl.config.section import Section


class MemoryTierConfig(Section):
    every: int | None = Field(default=None, ge=1)
    """Save to node memory every N steps; null: no memory tier. The fastest restart: it
    outlives the trainer process (not the node). With ranks on several nodes, each node
    keeps its ranks' part and a copy of a peer node's part, so one lost node loses none."""
    keep: int = Field(default=2, ge=1)
    """Memory checkpoints kept; older ones are dropped."""
    dir: str = "/dev/shm/grouprl"
    """A RAM-backed directory; checkpoints go to DIR/NAMESPACE/step_N (with several
    ranks: DIR/NAMESPACE/HOST/part_K/step_N on each node)."""
    max_gb: float = Field(default=8.0, gt=0)
    """Memory budget (per node): older memory checkpoints are dropped to fit a new one; a
    checkpoint bigger than the budget skips this tier (and says so)."""


class DiskTierConfig(Section):
    every: int | None = Field(default=None, ge=1)
    """Save to local disk every N steps; null: only at the end and on preemption."""
    keep: int = Field(default=2, ge=1)
    """Disk checkpoints kept (with `checkpoint.keep_best`, the best one besides)."""
    dir: str | None = None
    """Null: RUN_DIR/checkpoints."""


class S3TierConfig(Section):
    uri: str | None = None
    """`s3://bucket/prefix`; checkpoints go to PREFIX/NAMESPACE/step_N. Credentials come from
    the standard AWS chain (environment, ~/.aws, instance role), never from the recipe.
    Null: no S3 tier."""
    every: int | None = Field(default=None, ge=1)
    """Upload every N steps; null: only at the end and on preemption."""
    keep: int = Field(default=3, ge=1)
    """S3 checkpoints kept; older ones are deleted."""
    endpoint_url: str | None = None
    """An S3-compatible server (MinIO, Ceph, R2...); null: AWS."""
    region: str | None = None
    """The bucket's region; null: the standard AWS chain's."""
    max_backoff_s: float = Field(default=60.0, gt=0)
    """A failed upload is retried until it succeeds (training goes on meanwhile), waiting
    1 s, 2 s, 4 s... up to this long between tries."""


class CheckpointConfig(Section):
    namespace: str = "{name}"
    """Names this run's checkpoints in the shared tiers (memory, S3); `{name}` is the
    recipe name. Two runs must not share one."""
    memory: MemoryTierConfig = MemoryTierConfig()
    """The node-memory tier (off unless `every` is set)."""
    disk: DiskTierConfig = DiskTierConfig()
    """The local-disk tier."""
    s3: S3TierConfig = S3TierConfig()
    """The S3 tier (off unless `uri` is set)."""
    on_busy: Literal["wait", "skip"] = "wait"
    """When a save is due while the previous one is still being written: `wait` for it
    (the loop blocks, and the wait is logged) or `skip` this save (logged)."""
    grace_period_s: float = Field(default=60.0, gt=0)
    """On SIGTERM/SIGINT: time to finish the step, save to disk (and S3) and exit with code
    75; past it the process exits at once. A second signal exits at once."""
    keep_best: bool = False
    """Keep the checkpoint of the best validation so far on the disk tier, beside the
    newest `disk.keep`: a validation that beats it saves to disk at its step, pruning
    never removes it, `grouprl ckpt ls` marks it and `grouprl export RUN OUT --best`
    exports it. Validation before training does not count (there is no checkpoint of
    step 0). Needs data.eval and trainer.eval_every."""
    best_metric: str = "eval/accuracy"
    """With `keep_best`: the validation metric that ranks checkpoints, `eval/accuracy`,
    `eval/reward_mean` or another `eval/` metric the validation logs."""
    best_mode: Literal["max", "min"] = "max"
    """With `keep_best`: whether a higher (`max`) or lower (`min`) `best_metric` wins."""
