"""The loggers a config asks for, built on rank 0 once the run directory is open."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from trainwell.errors import UserError
from trainwell.imports import build_object
from trainwell.loggers.config import LogConfig
from trainwell.loggers.mlflow_run import sqlite_file

# Each optional logger: the module it needs, and the extra that installs it.
EXTRAS = {"tensorboard": ("tensorboard", "tensorboard"), "mlflow": ("mlflow", "mlflow")}


def check_extras(cfg: LogConfig) -> None:
    """One line naming the extra to install when a logger's package is missing.

    Called before training starts, so a run never trains for an hour and then finds out.

    Example:
        >>> check_extras(LogConfig())  # nothing asked, nothing needed
    """
    for key, (module, extra) in EXTRAS.items():
        if getattr(cfg, key) and importlib.util.find_spec(module) is None:
            raise UserError(
                f"log.{key}=true needs the {module} package: pip install 'trainwell[{extra}]'"
            )


def build_loggers(
    cfg: LogConfig,
    run_dir: Path,
    saved: dict[str, Any] | None = None,
    resume_step: int | None = None,
    kept: Iterable[tuple[int, int, str, str, float]] = (),
) -> list[tuple[str, Any]]:
    """The optional loggers, by name: TensorBoard, MLflow, then the user's ``log.loggers``.

    ``saved`` is the resumed checkpoint's ``loggers`` state (MLflow's run id),
    ``resume_step`` the step the run starts from and ``kept`` the metric rows the run
    directory kept (step, epoch, split, name, value), so that a resumed run continues the
    same logs with each step once.
    """
    saved = saved or {}
    named: list[tuple[str, Any]] = []
    if cfg.tensorboard:
        from trainwell.loggers.tb import TensorBoardLogger

        tb = TensorBoardLogger(run_dir / "tensorboard", resume_step, kept)
        named.append(("tensorboard", tb))
    if cfg.mlflow:
        from trainwell.loggers.mlflow_run import MlflowLogger

        run_id = (saved.get("mlflow") or {}).get("run_id")
        tags = {"trainwell.run_dir": str(run_dir.resolve())}
        logger = MlflowLogger(
            absolute_uri(cfg.mlflow_uri), cfg.mlflow_experiment, run_dir.name, run_id, tags
        )
        named.append(("mlflow", logger))
    for spec in cfg.loggers:
        name, obj = build_object(spec, "log.loggers")
        if not callable(getattr(obj, "log_metrics", None)):
            raise UserError(f"log.loggers: {name!r} has no log_metrics(step, metrics) method")
        named.append((_unique(type(obj).__name__, named), obj))
    return named


def absolute_uri(uri: str) -> str:
    """A ``sqlite:///relative.db`` URI made absolute, so later folder changes do not move it.

    Example:
        >>> absolute_uri("http://tracking:5000")
        'http://tracking:5000'
        >>> absolute_uri("sqlite:///mlflow.db").endswith("/mlflow.db")
        True
    """
    db = sqlite_file(uri)
    return uri if db is None else f"sqlite:///{db}"


def _unique(name: str, named: list[tuple[str, Any]]) -> str:
    taken = {n for n, _ in named}
    if name not in taken:
        return name
    i = 2
    while f"{name}#{i}" in taken:
        i += 1
    return f"{name}#{i}"
