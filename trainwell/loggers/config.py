"""The ``log`` section of the config: which loggers a run writes to, besides metrics.csv."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainwell._options import check, option


@dataclass
class LogConfig:
    """Where a run's numbers go: metrics.csv and the progress display always, and these."""

    tensorboard: bool = option(
        False, "TensorBoard event files under RUN/tensorboard/ (extra: trainwell[tensorboard])"
    )
    mlflow: bool = option(False, "an MLflow run: params, metrics, artifacts (extra: [mlflow])")
    mlflow_uri: str = option(
        "sqlite:///mlflow.db",
        "MLflow tracking URI; the default is a SQLite file in the working folder, beside "
        "runs/, so `mlflow ui --backend-store-uri sqlite:///mlflow.db` lists every run",
    )
    mlflow_experiment: str = option("trainwell", "MLflow experiment the runs go into")
    loggers: list[Any] = option(
        [],
        "user loggers: import paths 'package.module:Cls' or {name, kwargs}; each has "
        "log_metrics(step, metrics) and any of log_config, log_artifact, flush, close",
    )

    def __post_init__(self) -> None:
        check(bool(self.mlflow_uri.strip()), "log.mlflow_uri", "must not be empty")
        check(bool(self.mlflow_experiment.strip()), "log.mlflow_experiment", "must not be empty")
