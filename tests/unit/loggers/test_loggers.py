"""Loggers: TensorBoard and MLflow read back with their own readers, resume continuity after
SIGKILL, failing loggers switched off, user loggers, missing extras, only rank 0 logging."""

from __future__ import annotations

import csv
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

import trainwell
from tests import crash_at
from tests.conftest import REPO, SYNTHETIC, is_machine_metric, read_summary
from trainwell.config import load_config, to_dict
from trainwell.engine.loop.progress import make_console
from trainwell.loggers.mlflow_run import flatten_params

pytest.importorskip("tensorboard", reason="CI installs trainwell[tensorboard]")
pytest.importorskip("mlflow", reason="CI installs trainwell[mlflow]")

from mlflow.tracking import MlflowClient  # noqa: E402
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

QUIET = make_console(quiet=True)
BASE = [*SYNTHETIC, "train.epochs=3", "train.log_every=4", "train.precision=fp32"]


def csv_rows(run: Path) -> list[dict]:
    with open(run / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def csv_series(run: Path) -> dict[str, list[tuple[int, float]]]:
    """metrics.csv as ``split/name -> [(step, value)]``, the loggers' key for each row."""
    series: dict[str, list[tuple[int, float]]] = {}
    for r in csv_rows(run):
        key = f"{r['split']}/{r['name']}"
        series.setdefault(key, []).append((int(r["step"]), float(r["value"])))
    return series


def tb_series(run: Path) -> dict[str, list[tuple[int, float]]]:
    acc = EventAccumulator(str(run / "tensorboard"))
    acc.Reload()
    series = {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    # A resumed run's purge_step drops a killed run's later points but keeps their tag:
    # mem/tensor_mb, first sampled 10 s into a run, can exist only past the resume step.
    return {tag: points for tag, points in series.items() if points}


def mlflow_runs(db: Path) -> tuple[MlflowClient, list]:
    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    exp = client.get_experiment_by_name("trainwell")
    return client, client.search_runs([exp.experiment_id]) if exp else []


def mlflow_series(client: MlflowClient, run_id: str, keys) -> dict[str, list[tuple[int, float]]]:
    return {
        k: sorted((m.step, m.value) for m in client.get_metric_history(run_id, k)) for k in keys
    }


def assert_close_series(got, want, rel=1e-6, machine_values=True):
    """The same series: the same steps, and the same values (those of the machine's
    figures, samples/s, memory and timings, only with ``machine_values``)."""
    assert sorted(got) == sorted(want)
    for key, points in want.items():
        assert [s for s, _ in got[key]] == [s for s, _ in points], key
        if not machine_values and is_machine_metric(key.split("/", 1)[-1]):
            continue
        for (_, a), (_, b) in zip(got[key], points):
            assert a == pytest.approx(b, rel=rel, abs=1e-9), key


def fit(tmp_path: Path, *extra: str, **kw):
    db = tmp_path / "mlflow.db"
    cfg = load_config(overrides=[*BASE, f"run.dir={tmp_path / 'run'}",
                                 f"log.mlflow_uri=sqlite:///{db}", *extra])  # fmt: skip
    return trainwell.fit(cfg, **{"console": QUIET, **kw})


@pytest.mark.slow
def test_tensorboard_and_mlflow_hold_what_metrics_csv_holds(tmp_path):
    result = fit(tmp_path, "log.tensorboard=true", "log.mlflow=true")
    run = result.run_dir
    want = csv_series(run)
    assert {"train/loss", "train/lr", "val/loss", "val/accuracy", "train/mem/rss_mb"} <= set(want)

    # TensorBoard, read by its own reader: every scalar, same steps, same values (float32).
    assert_close_series(tb_series(run), want)
    acc = EventAccumulator(str(run / "tensorboard"))
    acc.Reload()
    (config_text,) = acc.Tensors("config/text_summary")
    assert b"mlflow_uri" in config_text.tensor_proto.string_val[0]

    # MLflow, read through MlflowClient from the SQLite store.
    client, runs = mlflow_runs(tmp_path / "mlflow.db")
    (mlrun,) = runs
    assert mlrun.info.status == "FINISHED" and mlrun.info.run_name == "run"
    assert_close_series(mlflow_series(client, mlrun.info.run_id, want), want)
    assert mlrun.data.params == {
        k: v for k, v in flatten_params(to_dict(load_config(run / "config.yaml"))).items()
    }
    assert mlrun.data.params["train.log_every"] == "4"
    artifacts = {a.path for a in client.list_artifacts(mlrun.info.run_id)}
    assert {"config.yaml", "metrics.csv", "summary.json", "env.json", "curves.png"} <= artifacts
    local = Path(client.download_artifacts(mlrun.info.run_id, "summary.json", str(tmp_path)))
    assert local.read_text() == (run / "summary.json").read_text()
    assert mlrun.data.tags["trainwell.run_dir"] == str(run.resolve())
    # Artifacts live beside the database, not in whatever folder the process ran in.
    assert list((tmp_path / "mlruns" / "trainwell").glob("*/artifacts/summary.json"))
    assert not (Path.cwd() / "mlruns").exists()


def _launch(run: Path, db: Path, *extra: str) -> subprocess.Popen:
    args = [*BASE, "train.epochs=6", "train.log_every=2", "checkpoint.every_steps=5",
            "log.tensorboard=true", "log.mlflow=true", f"log.mlflow_uri=sqlite:///{db}",
            f"run.dir={run}", "doctor.enabled=false", *extra]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}  # see test_resume._launch
    return subprocess.Popen(
        [sys.executable, "-m", "trainwell", "train", *args],
        cwd=run.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


@pytest.mark.slow
def test_a_resume_after_sigkill_continues_the_same_runs_without_duplicate_steps(tmp_path):
    run, db = tmp_path / "run", tmp_path / "mlflow.db"
    proc = _launch(run, db)
    deadline = time.time() + 120
    # Killed a little after its second step-N checkpoint: points after it are on disk too.
    while not (run / "checkpoints" / "step-10.pt").exists() and time.time() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    assert read_summary(run)["status"] == "running"  # killed outright: nothing said
    resumed = _launch(run, db, "--resume", "auto")
    out, err = resumed.communicate(timeout=180)
    assert resumed.returncode == 0, err[-2000:]
    assert "resuming from" in out
    want = csv_series(run)

    assert_close_series(tb_series(run), want)  # the killed process's extra points are purged
    for tag, points in tb_series(run).items():
        steps = [s for s, _ in points]
        assert len(steps) == len(set(steps)), f"{tag} has a step twice: {steps}"

    client, runs = mlflow_runs(db)
    assert len(runs) == 1, "the resumed run must continue the same MLflow run"
    (mlrun,) = runs
    assert mlrun.info.status == "FINISHED"
    got = mlflow_series(client, mlrun.info.run_id, want)
    for key, points in got.items():
        steps = [s for s, _ in points]
        assert len(steps) == len(set(steps)), f"{key} has a step twice in MLflow: {steps}"
    # MLflow keeps what it was sent: a point the killed process sent after step-10.pt stays
    # (the resumed run sends only later steps). The model's values are the resumed run's
    # to the bit; the machine's figures (samples/s, timings) of that point are the killed one's.
    assert_close_series(got, want, machine_values=False)


@pytest.mark.slow
def test_a_resume_from_a_step_checkpoint_before_its_evaluation_logs_that_evaluation_once(
    tmp_path,
):
    """step-28.pt is written before epoch 2's evaluation at step 28; a run resumed from it
    evaluates at step 28 again, while TensorBoard and MLflow already hold the killed
    run's evaluation there."""
    run, db = tmp_path / "run", tmp_path / "mlflow.db"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = [sys.executable, "-m", "trainwell", "train", *BASE, "train.epochs=4",
            "train.log_every=2", "checkpoint.every_steps=14", "log.tensorboard=true",
            "log.mlflow=true", f"log.mlflow_uri=sqlite:///{db}", f"run.dir={run}"]  # fmt: skip
    crashed = subprocess.run([*args, crash_at.override(31)], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=180)  # fmt: skip
    assert crashed.returncode == 13, crashed.stderr[-2000:]
    assert tb_series(run)["val/loss"][-1][0] == 28  # the killed run's evaluation is there
    resumed = subprocess.run([*args, "--resume", str(run / "checkpoints" / "step-28.pt")],
                             cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=180)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    want = csv_series(run)
    assert [s for s, _ in want["val/loss"]] == [14, 28, 42, 56]
    assert_close_series(tb_series(run), want)
    client, (mlrun,) = mlflow_runs(db)
    assert_close_series(mlflow_series(client, mlrun.info.run_id, want), want)


class Recording:
    """A user logger: keeps every call, or raises from its ``fail_at``-th log_metrics on."""

    calls: list = []

    def __init__(self, fail_at: int = 0) -> None:
        self.fail_at = fail_at
        self.seen = 0
        Recording.calls = []

    def log_metrics(self, step, metrics):
        self.seen += 1
        if self.fail_at and self.seen >= self.fail_at:
            raise OSError(28, "No space left on device")
        Recording.calls.append(("metrics", step, dict(metrics)))

    def log_config(self, config):
        Recording.calls.append(("config", dict(config)))

    def log_artifact(self, path):
        Recording.calls.append(("artifact", Path(path).name))

    def close(self, status):
        Recording.calls.append(("close", status))


def recorded() -> list:
    """The calls the engine's own copy of :class:`Recording` saw (it imports this file by
    its import path, which may be another module object than pytest's)."""
    from trainwell.imports import resolve

    return resolve("tests.unit.loggers.test_loggers:Recording", "log.loggers").calls


@pytest.mark.slow
def test_a_user_logger_by_import_path_gets_config_metrics_artifacts_and_status(tmp_path):
    result = fit(tmp_path, "log.loggers=[tests.unit.loggers.test_loggers:Recording]")
    calls = recorded()
    kinds = Counter(c[0] for c in calls)
    assert calls[0][0] == "config" and calls[0][1]["train"]["log_every"] == 4
    assert calls[-1] == ("close", "completed")
    assert kinds["metrics"] > 5
    logged = {(step, k) for kind, step, *m in calls if kind == "metrics" for k in m[0]}
    rows = {(int(r["step"]), f"{r['split']}/{r['name']}") for r in csv_rows(result.run_dir)}
    assert logged == rows
    artifacts = {c[1] for c in calls if c[0] == "artifact"}
    assert {"metrics.csv", "summary.json", "config.yaml"} <= artifacts


@pytest.mark.slow
def test_a_logger_that_fails_mid_run_is_reported_once_and_switched_off(tmp_path, capsys):
    cfg = load_config(overrides=[*BASE, f"run.dir={tmp_path / 'run'}",
                                 "log.loggers=[{name: 'tests.unit.loggers.test_loggers:Recording', "
                                 "kwargs: {fail_at: 3}}]"])  # fmt: skip
    result = trainwell.fit(cfg, console=make_console())
    calls = recorded()
    out = capsys.readouterr().out
    assert out.count("logger Recording failed in log_metrics") == 1
    assert "OSError: [Errno 28] No space left on device" in out
    assert read_summary(result.run_dir)["status"] == "completed"
    assert sum(c[0] == "metrics" for c in calls) == 2  # then never called again
    assert ("close", "completed") not in calls
    # The run's own record is whole.
    assert {r["split"] for r in csv_rows(result.run_dir)} == {"train", "val"}


class LockTheDatabase:
    """A callback that takes an exclusive lock on the MLflow database mid-run (as another
    writer would) and keeps it until the run ends."""

    def __init__(self, db: str, at_step: int = 6) -> None:
        self.db, self.at_step, self.conn = db, at_step, None

    def on_step_end(self, ctx):
        if ctx.step == self.at_step:
            # MLflow may be mid-write at this very step (more likely on a loaded machine):
            # wait for its transaction to end, as another writer would, rather than fail.
            self.conn = sqlite3.connect(self.db, timeout=60, isolation_level=None)
            self.conn.execute("BEGIN EXCLUSIVE")

    def on_fit_end(self, ctx):
        self.conn.execute("ROLLBACK")
        self.conn.close()


@pytest.mark.slow
def test_a_locked_mlflow_database_switches_mlflow_off_and_the_run_completes(tmp_path, capsys):
    db = tmp_path / "mlflow.db"
    lock = LockTheDatabase(str(db))
    result = fit(tmp_path, "log.mlflow=true", "log.tensorboard=true", callbacks=[lock],
                 console=make_console())
    assert read_summary(result.run_dir)["status"] == "completed"
    # TensorBoard and the CSV went on to the end; MLflow has what it stored before the lock
    # (the params at the start; metrics go in batches, so perhaps none), and no more.
    assert_close_series(tb_series(result.run_dir), csv_series(result.run_dir))
    client, (mlrun,) = mlflow_runs(db)
    assert mlrun.data.params["train.log_every"] == "4"
    steps = [m.step for m in client.get_metric_history(mlrun.info.run_id, "train/loss")]
    assert not steps or max(steps) < read_summary(result.run_dir)["steps"]
    out, err = capsys.readouterr()
    assert out.count("logger mlflow failed") == 1 and "database is locked" in out
    assert "SELECT" not in err  # the store's own error dump is not the user's news


@pytest.mark.slow
def test_a_failing_logger_is_named_once_on_the_console(tmp_path):
    import io

    out = io.StringIO()
    cfg = load_config(overrides=[*BASE, f"run.dir={tmp_path / 'run'}",
                                 "log.loggers=[{name: 'tests.unit.loggers.test_loggers:Recording', "
                                 "kwargs: {fail_at: 1}}]"])  # fmt: skip
    trainwell.fit(cfg, console=make_console(out))
    lines = [ln for ln in out.getvalue().splitlines() if "logger Recording" in ln]
    assert len(lines) == 1 and "switched off, training goes on" in lines[0]


@pytest.mark.parametrize("extra", ["tensorboard", "mlflow"])
def test_a_missing_extra_is_one_line_before_anything_is_written(cli, tmp_path, monkeypatch, extra):
    from trainwell.loggers import build

    real = build.importlib.util.find_spec
    monkeypatch.setattr(
        build.importlib.util, "find_spec", lambda name: None if name == extra else real(name)
    )
    code, out, err = cli("train", *BASE, f"log.{extra}=true", f"run.dir={tmp_path / 'run'}")
    assert code == 2
    assert err.strip() == (
        f"trainwell: error: log.{extra}=true needs the {extra} package: "
        f"pip install 'trainwell[{extra}]'"
    )
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("[tests.unit.loggers.test_loggers:nothing_here]",
         "has no attribute|cannot be found|not found"),
        ("[tests.unit.loggers.test_loggers:QUIET]", "not a class"),
        ("[collections:Counter]", "standard-library"),
        ("[tests.unit.loggers.test_loggers:LockTheDatabase]", "cannot call"),
        ("[tests.unit.loggers.test_loggers:NotALogger]", "has no log_metrics"),
    ],
)
def test_bad_user_loggers_are_one_line_before_training(cli, tmp_path, spec, match):
    import re

    code, _, err = cli("train", *BASE, f"log.loggers={spec}", f"run.dir={tmp_path / 'run'}")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert re.search(match, err), err
    assert read_summary(tmp_path / "run")["status"] == "failed"
    assert not (tmp_path / "run" / "checkpoints" / "last.pt").exists()


def test_an_unopenable_tracking_store_is_one_line(cli, tmp_path):
    (tmp_path / "a-file").write_text("")  # a database cannot live inside a file
    uri = f"sqlite:///{tmp_path}/a-file/mlflow.db"
    code, _, err = cli("train", *BASE, "log.mlflow=true", f"log.mlflow_uri={uri}",
                       f"run.dir={tmp_path / 'run'}")  # fmt: skip
    assert code == 2 and len(err.strip().splitlines()) == 1
    # Refused before the run folder is made (a failed run there would block the rerun).
    assert "log.mlflow_uri" in err and "is a file, not a folder" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_only_rank_0_logs(tmp_path):
    run, db = tmp_path / "run", tmp_path / "mlflow.db"
    proc = subprocess.run(
        [sys.executable, "-m", "trainwell", "train", "--nproc", "2", *BASE, "train.epochs=2",
         "log.tensorboard=true", "log.mlflow=true", f"log.mlflow_uri=sqlite:///{db}",
         "log.loggers=[tests.unit.loggers.test_loggers:RankFile]", f"run.dir={run}"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [p.name for p in tmp_path.glob("rank-*.txt")] == ["rank-0.txt"]
    assert len(list((run / "tensorboard").glob("events.out.tfevents.*"))) == 1
    _, runs = mlflow_runs(db)
    assert len(runs) == 1
    assert_close_series(tb_series(run), csv_series(run))


class NotALogger:
    def log(self, step, metrics):  # not the protocol's name
        pass


class RankFile:
    """Writes ``rank-R.txt`` in the working folder when it is built: who built a logger."""

    def __init__(self) -> None:
        Path(f"rank-{os.environ.get('RANK', '0')}.txt").write_text("built")

    def log_metrics(self, step, metrics):
        pass


@pytest.mark.slow
def test_the_confusion_matrix_example_logs_an_image_at_each_evaluation(tmp_path):
    folder = REPO / "examples" / "callbacks"
    sys.path.insert(0, str(folder))
    try:
        from confusion_matrix import ConfusionMatrix
    finally:
        sys.path.remove(str(folder))
    result = fit(tmp_path, "log.tensorboard=true", callbacks=[ConfusionMatrix()])
    acc = EventAccumulator(str(result.run_dir / "tensorboard"), size_guidance={"images": 0})
    acc.Reload()
    evals = sorted({int(r["step"]) for r in csv_rows(result.run_dir) if r["split"] == "val"})
    images = acc.Images("val/confusion_matrix")
    assert [i.step for i in images] == evals and len(evals) == 3
    assert images[0].encoded_image_string.startswith(b"\x89PNG")
    counts = ConfusionMatrix.count(result.model, [(x, y) for x, y in _val_batches()])
    assert counts.sum() == 64 and counts.shape == (4, 4)


def _val_batches():
    import torch

    g = torch.Generator().manual_seed(0)
    for _ in range(2):
        yield torch.randn(32, 8, generator=g), torch.randint(0, 4, (32,), generator=g)


@pytest.mark.parametrize("key", ["log.mlflow_uri", "log.mlflow_experiment"])
def test_an_empty_mlflow_setting_is_one_line(cli, tmp_path, key):
    code, _, err = cli("train", *BASE, "log.mlflow=true", f'{key}=" "', f"run.dir={tmp_path / 'r'}")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"{key}: must not be empty" in err
    assert not (tmp_path / "r").exists()
