"""MLflow: the config as params, metrics at log points, the run's files as artifacts at the
end, and the run's status mirrored (running, finished, failed, killed).

Metrics are gathered and sent in one batch every few seconds, through one background
thread, so a slow tracking store (a SQLite file, a server) never holds up a training step:
a store call costs milliseconds of Python, which at every log point would cost several
percent of a small model's steps. ``flush()`` (at each checkpoint) sends what is gathered
and waits, so everything logged before a checkpoint is stored before the checkpoint exists. The
MLflow run id is kept in the checkpoint: a resumed run continues the same MLflow run, and
points the killed process already stored after its last checkpoint are not sent twice.

Needs the ``mlflow`` package (``pip install 'trainwell[mlflow]'``).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

# How the run's end maps onto MLflow's run statuses.
STATUS = {"completed": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}
# MLflow's limits: 100 params per batch call, 6000 characters per param value.
_PARAM_BATCH, _PARAM_CHARS = 100, 6000
# Metrics gathered are sent at most this often (and at flush and close).
SEND_EVERY_S = 3.0
# MLflow's limit of metrics per log_batch call.
_METRIC_BATCH = 1000
# How long a flush waits for the store (a database locked by another writer) before the
# logger is reported and switched off.
FLUSH_TIMEOUT_S = 60.0


class MlflowLogger:
    """One MLflow run of a tracking store; ``state_dict()`` holds its id.

    Example::

        log = MlflowLogger("sqlite:///mlflow.db", "trainwell", run_name="digits-cnn")
        log.log_metrics(10, {"train/loss": 0.5})
        log.close("completed")
    """

    def __init__(
        self,
        uri: str,
        experiment: str,
        run_name: str,
        run_id: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> None:
        from mlflow.tracking import MlflowClient

        _quiet_store_logs()
        self.client = MlflowClient(tracking_uri=uri)
        self.resumed = run_id is not None and self._reopen(run_id)
        if run_id is None or not self.resumed:
            run_id = self._create(experiment, run_name, dict(tags or {}))
        self.run_id: str = run_id
        # Per metric, the last step the store holds: a resumed run does not resend them.
        self.stored_until = self._stored_steps() if self.resumed else {}
        self._worker = _Worker()
        self._gathered: list[Any] = []
        self._sent_at = time.monotonic()

    def _create(self, experiment: str, run_name: str, tags: dict[str, str]) -> str:
        found = self.client.get_experiment_by_name(experiment)
        exp_id = found.experiment_id if found else self.client.create_experiment(
            experiment, artifact_location=artifact_location(self.client.tracking_uri, experiment)
        )
        return self.client.create_run(exp_id, run_name=run_name, tags=tags).info.run_id

    def _reopen(self, run_id: str) -> bool:
        from mlflow.exceptions import MlflowException

        try:
            self.client.get_run(run_id)
        except MlflowException:
            return False  # a store that lost the run (or another store): start a new one
        self.client.update_run(run_id, status="RUNNING")
        return True

    def _stored_steps(self) -> dict[str, int]:
        keys = self.client.get_run(self.run_id).data.metrics
        history = self.client.get_metric_history
        return {key: max(m.step for m in history(self.run_id, key)) for key in keys}

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self._gathered += [
            Metric(key, float(value), now, step)
            for key, value in metrics.items()
            if step > self.stored_until.get(key, -1)
        ]
        if time.monotonic() - self._sent_at >= SEND_EVERY_S:
            self._send()

    def _send(self) -> None:
        gathered, self._gathered = self._gathered, []
        self._sent_at = time.monotonic()
        for i in range(0, len(gathered), _METRIC_BATCH):
            batch = gathered[i : i + _METRIC_BATCH]
            self._worker.submit(self.client.log_batch, self.run_id, metrics=batch)

    def log_config(self, config: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        flat = flatten_params(config)
        if self.resumed:
            # MLflow refuses to change a param; a resumed run keeps the values it started with.
            held = self.client.get_run(self.run_id).data.params
            flat = {k: v for k, v in flat.items() if k not in held}
        params = [Param(k, v[:_PARAM_CHARS]) for k, v in flat.items()]
        for i in range(0, len(params), _PARAM_BATCH):
            self._worker.submit(
                self.client.log_batch, self.run_id, params=params[i : i + _PARAM_BATCH]
            )

    def log_artifact(self, path: Path) -> None:
        self._worker.submit(self.client.log_artifact, self.run_id, str(path))

    def flush(self) -> None:
        self._send()
        self._worker.wait(FLUSH_TIMEOUT_S)

    def close(self, status: str = "completed") -> None:
        """Store what is queued, then mark the run finished, failed or killed."""
        self._send()
        self._worker.submit(self.client.set_terminated, self.run_id, STATUS.get(status, status))
        self._worker.stop(FLUSH_TIMEOUT_S)

    def state_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id}


class _Worker:
    """Calls run in order on one daemon thread; the first error is raised to the caller."""

    def __init__(self) -> None:
        self._queue: queue.Queue[Any] = queue.Queue()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="trainwell-mlflow", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self._raise_error()
        self._queue.put((fn, args, kwargs))

    def wait(self, timeout: float) -> None:
        """Block until everything submitted so far has run."""
        done = threading.Event()
        self._queue.put(done)
        if not done.wait(timeout):
            raise TimeoutError(f"the tracking store did not answer in {timeout:.0f}s")
        self._raise_error()

    def stop(self, timeout: float) -> None:
        self.wait(timeout)
        self._queue.put(None)

    def _raise_error(self) -> None:
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if isinstance(item, threading.Event):
                item.set()
            elif self.error is None:  # after an error, drop the rest: it is switched off
                fn, args, kwargs = item
                try:
                    fn(*args, **kwargs)
                except Exception as exc:  # noqa: BLE001 - handed to the training thread
                    self.error = exc


def sqlite_file(uri: str) -> Path | None:
    """The absolute path of the database file of a ``sqlite:///`` URI; None for others.

    Example:
        >>> sqlite_file("sqlite:////work/mlflow.db")
        PosixPath('/work/mlflow.db')
        >>> sqlite_file("http://tracking:5000") is None
        True
    """
    prefix = "sqlite:///"
    return Path(uri[len(prefix) :]).resolve() if uri.startswith(prefix) else None


def artifact_location(uri: str, experiment: str) -> str | None:
    """Beside a SQLite database, ``mlruns/<experiment>``; a server decides for itself.

    MLflow's own default is ``./mlruns`` in whatever folder the process runs in, which
    scatters a project's artifacts; beside the database they stay with the runs' records.

    Example:
        >>> artifact_location("sqlite:////work/mlflow.db", "trainwell")
        'file:///work/mlruns/trainwell'
        >>> artifact_location("http://tracking:5000", "trainwell") is None
        True
    """
    db = sqlite_file(uri)
    return None if db is None else (db.parent / "mlruns" / experiment).as_uri()


def flatten_params(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """A nested config as MLflow params: dotted keys, string values; lists stay whole.

    Example:
        >>> flatten_params({"optim": {"lr": 0.001, "betas": [0.9, 0.99]}, "seed": 0})
        {'optim.lr': '0.001', 'optim.betas': '[0.9, 0.99]', 'seed': '0'}
    """
    flat: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten_params(value, f"{name}."))
        else:
            flat[name] = str(value)
    return flat


def _quiet_store_logs() -> None:
    # A SQLite store logs its schema migrations at INFO on first use, and a failed query
    # as a page of SQL: not the user's news. A failure reaches the user as one line (the
    # logger is switched off, naming the error).
    for name in ("alembic", "mlflow.tracking"):
        logging.getLogger(name).setLevel(logging.WARNING)
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
