"""Loggers: where a run's numbers go besides ``metrics.csv`` and the progress display.

Built in: TensorBoard (``log.tensorboard=true``) and MLflow (``log.mlflow=true``). Any
object with ``log_metrics(step, metrics)`` is a logger too (``log.loggers``); see
:mod:`trainwell.loggers.base` for the protocol.
"""

from trainwell.loggers.base import Logger, Loggers
from trainwell.loggers.build import build_loggers, check_extras
from trainwell.loggers.config import LogConfig

__all__ = ["LogConfig", "Logger", "Loggers", "build_loggers", "check_extras"]
