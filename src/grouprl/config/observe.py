"""The `metrics` section: TensorBoard, Weights & Biases, MLflow, the report. Imports no
torch."""

from __future__ import annotations

from grouprl.config.section import Section


class WandbConfig(Section):
    project: str | None = None
    """Set to log to Weights & Biases."""
    entity: str | None = None
    """The W&B team or user the run belongs to; null: your default entity."""
    api_key: str | None = None
    """Prefer the WANDB_API_KEY environment variable; never saved unredacted."""


class MlflowConfig(Section):
    enabled: bool = False
    """Log to MLflow (`pip install 'grouprl[mlflow]'`): the resolved config as the run's
    params (secrets redacted), every step's metrics. A resumed run logs into the same
    MLflow run."""
    tracking_uri: str | None = None
    """An MLflow server (`http://host:5000`), `databricks`, or a file store
    (`file:///path/mlruns`); null: $MLFLOW_TRACKING_URI if set, else a file store in
    RUN_DIR/mlruns. MLflow 3 keeps file stores in maintenance: grouprl sets
    MLFLOW_ALLOW_FILE_STORE=true for one (unless it is set)."""
    experiment: str | None = None
    """MLflow experiment (created if missing); null: the recipe name."""
    run_name: str | None = None
    """MLflow run name; null: the run directory's name."""


class MetricsConfig(Section):
    tensorboard: bool = True
    """Write TensorBoard scalars to RUN_DIR/tensorboard."""
    wandb: WandbConfig = WandbConfig()
    """Weights & Biases (`pip install 'grouprl[wandb]'`): on when `project` is set."""
    mlflow: MlflowConfig = MlflowConfig()
    """MLflow: on when `enabled` is true."""
    progress: bool = True
    """Show a rich progress bar with live metrics."""
    report: bool = True
    """At the end of a run write RUN_DIR/report.html and RUN_DIR/reward_curve.png from
    metrics.jsonl (~1 s, and ~1.5 s more to load matplotlib the first time in a process)."""
