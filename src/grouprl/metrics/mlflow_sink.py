"""MLflow, an optional extra (``pip install 'grouprl[mlflow]'``: mlflow-skinny), imported late.

    metrics.mlflow ──► MlflowClient(tracking_uri) ──► experiment (default: the recipe name)
                                                   └► run (default: the run dir's name)
                                                        params: the resolved config, dotted
                                                        metrics: every step's, at its step

The client is used directly (no ``mlflow.start_run``: no process-wide active run). The
MLflow run id is kept in ``RUN_DIR/mlflow_run_id``, so a resumed grouprl run logs into
the same MLflow run; its params are logged once, when it is created (MLflow refuses to
change a param, and a resume changes ``trainer.resume``). Steps a crashed process logged
past the resumed checkpoint stay in MLflow's history beside the new ones. MLflow 3
refuses a file store (``file:``, the default here) unless ``MLFLOW_ALLOW_FILE_STORE`` is
set, so the sink sets it for one; a database store (``sqlite:``) needs SQLAlchemy, which
mlflow-skinny does not bring.

Metric names keep their first ``/`` (MLflow's UI groups by it) and join deeper parts
with ``.`` (``mlflow_name``): the file store keeps a metric as a file at its name's path,
so ``reward/code_tests`` beside ``reward/code_tests/failures`` could not both be stored.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from grouprl.config.observe import MlflowConfig
from grouprl.config.run_checks import MLFLOW_MISSING

RUN_ID_FILE = "mlflow_run_id"
LOCAL_STORE = "mlruns"
PARAM_CHARS = 6000  # MLflow's limit on a param value


class MlflowNotInstalledError(ImportError):
    """metrics.mlflow.enabled is set but mlflow-skinny is missing."""

    user_error = True


class MlflowSink:
    """Logs each step's metrics to one MLflow run, with the (already redacted) config."""

    def __init__(
        self, cfg: MlflowConfig, *, run_dir: Path, run_name: str, config_dict: Mapping[str, Any]
    ) -> None:
        try:
            from mlflow.entities import Param
            from mlflow.exceptions import MlflowException
            from mlflow.tracking import MlflowClient
        except ImportError:
            raise MlflowNotInstalledError(MLFLOW_MISSING) from None
        run_dir = Path(run_dir)
        self.tracking_uri = tracking_uri(cfg, run_dir)
        if self.tracking_uri.startswith("file:"):
            # MLflow 3 keeps its file store in maintenance and refuses it unless this is
            # set; the store in the run dir is grouprl's default (a user's setting wins)
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self._client = MlflowClient(tracking_uri=self.tracking_uri)
        saved = _saved_run_id(run_dir)
        if saved is not None:
            try:
                self._client.update_run(saved, status="RUNNING")
                self.run_id = saved
                return
            except MlflowException:  # another tracking store: start a run there
                pass
        experiment = cfg.experiment or run_name
        found = self._client.get_experiment_by_name(experiment)
        experiment_id = found.experiment_id if found else self._client.create_experiment(experiment)
        run = self._client.create_run(
            experiment_id,
            run_name=cfg.run_name or run_dir.resolve().name,
            tags={"grouprl.run_dir": str(run_dir.resolve())},
        )
        self.run_id = run.info.run_id
        params = [Param(key, value) for key, value in flat_params(config_dict).items()]
        self._client.log_batch(self.run_id, params=params)
        (run_dir / RUN_ID_FILE).write_text(self.run_id + "\n", encoding="utf-8")

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(mlflow_name(key), value, now, step) for key, value in metrics.items()]
        self._client.log_batch(self.run_id, metrics=batch)

    def close(self) -> None:
        self._client.set_terminated(self.run_id)


def mlflow_name(key: str) -> str:
    """``reward/code_tests/outcome/passed`` -> ``reward/code_tests.outcome.passed``: one
    folder level, so no metric's name is another's folder in a file store."""
    group, slash, rest = key.partition("/")
    return group + slash + rest.replace("/", ".")


def tracking_uri(cfg: MlflowConfig, run_dir: Path) -> str:
    """``metrics.mlflow.tracking_uri``, else $MLFLOW_TRACKING_URI, else RUN_DIR/mlruns."""
    if cfg.tracking_uri:
        return cfg.tracking_uri
    return os.environ.get("MLFLOW_TRACKING_URI") or (run_dir / LOCAL_STORE).resolve().as_uri()


def flat_params(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """``{"rollout.n": "8", "reward.functions": '[{"name": ...}]', ...}``: sections as
    dotted keys, other values as text (lists as JSON), null as ``null``."""
    out: dict[str, str] = {}
    for key, value in config.items():
        if isinstance(value, Mapping) and value:
            out |= flat_params(value, prefix=f"{prefix}{key}.")
            continue
        text = json.dumps(value) if isinstance(value, list | Mapping | None) else str(value)
        out[f"{prefix}{key}"] = text[:PARAM_CHARS]
    return out


def _saved_run_id(run_dir: Path) -> str | None:
    path = run_dir / RUN_ID_FILE
    if not path.is_file():
        return None
    return path.read_text(encoding="utf-8").strip() or None
