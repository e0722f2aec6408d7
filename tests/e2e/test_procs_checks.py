"""Config errors that used to come late are refused before anything is written, fast, in
one line, and once under ``--nproc 2`` (issue 25, items 9 and 20; item 4's probe).

The one-process refusals run the CLI in this process (the ``cli`` fixture: what is checked
is the refusal, not a launch); the ``--nproc`` ones launch the real launcher process."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
import time

import pytest

from tests.procs_helpers import PY, TINY, env_for
from trainwell.errors import UserError
from trainwell.loggers.tracking_uri import check_tracking_uri

# Seconds from launch to the refusal: imports and one probe (MLflow took 2 to 4 minutes).
FAST_S = 60


def _train(tmp_path, *args, nproc=None):
    launcher = ["--nproc", str(nproc)] if nproc else []
    started = time.monotonic()
    env = env_for(tmp_path)
    if nproc:  # unset, torchrun warns that it sets OMP_NUM_THREADS: the sign it began
        env.pop("OMP_NUM_THREADS", None)
    proc = subprocess.run([PY, "-m", "trainwell", "train", *launcher, *TINY, "train.epochs=1",
                           *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    return proc, time.monotonic() - started


def _train_here(cli, *args):
    """``trainwell train`` of one process, in this one: (its result, seconds it took)."""
    started = time.monotonic()
    code, out, err = cli("train", *TINY, "train.epochs=1", *args)
    return subprocess.CompletedProcess(args, code, out, err), time.monotonic() - started


def _one_line(proc) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in lines if line.startswith("trainwell: error:")]
    assert len(errors) == 1, proc.stderr[-2000:]
    assert not any("exitcode" in line or "Traceback" in line for line in lines), proc.stderr
    return errors[0]


@pytest.fixture
def silent_port():
    """A server that accepts connections and never says a word."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held = []
    stop = threading.Event()

    def accept():
        server.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(OSError):
                held.append(server.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


def _closed_port() -> int:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    return port


@pytest.mark.slow
@pytest.mark.parametrize("uri", ["sqlite:///", "sqlite://", "bogus://tracking"])
def test_a_bad_tracking_uri_is_one_line_before_the_run_folder(cli, tmp_path, uri):
    pytest.importorskip("mlflow")
    run = tmp_path / "run"
    proc, took = _train_here(cli, "log.mlflow=true", f"log.mlflow_uri={uri}", f"run.dir={run}")
    assert "log.mlflow_uri" in _one_line(proc)
    assert took < FAST_S
    assert not run.exists()


@pytest.mark.slow
def test_an_unreachable_server_is_refused_in_seconds(cli, tmp_path):
    pytest.importorskip("mlflow")
    run = tmp_path / "run"
    uri = f"http://127.0.0.1:{_closed_port()}"
    proc, took = _train_here(cli, "log.mlflow=true", f"log.mlflow_uri={uri}", f"run.dir={run}")
    line = _one_line(proc)
    assert "unreachable" in line and uri in line
    assert took < FAST_S and not run.exists()


@pytest.mark.slow
def test_a_server_that_never_answers_is_refused_after_the_probe_timeout(cli, tmp_path, silent_port):
    pytest.importorskip("mlflow")
    run = tmp_path / "run"
    uri = f"http://127.0.0.1:{silent_port}"
    proc, took = _train_here(cli, "log.mlflow=true", f"log.mlflow_uri={uri}", f"run.dir={run}")
    assert "no answer in" in _one_line(proc)
    assert took < FAST_S and not run.exists()


@pytest.mark.slow
def test_the_corrected_rerun_is_not_blocked(cli, tmp_path):
    pytest.importorskip("mlflow")
    run = tmp_path / "run"
    proc, _ = _train_here(cli, "log.mlflow=true", "log.mlflow_uri=sqlite:///", f"run.dir={run}")
    _one_line(proc)
    proc, _ = _train_here(cli, "log.mlflow=true", f"log.mlflow_uri=sqlite:///{tmp_path}/m.db",
                          f"run.dir={run}")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.slow
def test_a_file_where_tensorboard_goes(cli, tmp_path):
    pytest.importorskip("tensorboard")
    run = tmp_path / "run"
    run.mkdir()
    (run / "tensorboard").write_text("not a folder")
    proc, _ = _train_here(cli, "log.tensorboard=true", f"run.dir={run}")
    assert "tensorboard" in _one_line(proc)
    assert sorted(p.name for p in run.iterdir()) == ["tensorboard"]  # nothing written


@pytest.mark.slow
def test_nproc_batch_that_does_not_split_is_one_line_before_any_worker(tmp_path):
    run = tmp_path / "run"
    proc, _ = _train(tmp_path, "data.batch_size=30", f"run.dir={run}", nproc=4)
    assert "does not split into 4 processes" in _one_line(proc)
    assert "OMP_NUM_THREADS" not in proc.stderr  # refused before torchrun began
    assert not run.exists()


@pytest.mark.slow
def test_nproc_tracking_uri_refused_by_the_launcher(tmp_path):
    pytest.importorskip("mlflow")
    run = tmp_path / "run"
    proc, _ = _train(tmp_path, "log.mlflow=true", "log.mlflow_uri=sqlite:///", f"run.dir={run}",
                     nproc=2)  # fmt: skip
    _one_line(proc)
    assert "OMP_NUM_THREADS" not in proc.stderr and not run.exists()


@pytest.mark.slow
def test_nproc_monitor_error_prints_once(tmp_path):
    run = tmp_path / "run"
    proc, _ = _train(tmp_path, "early_stop.monitor=val/nope", f"run.dir={run}", nproc=2)
    assert "early_stop.monitor" in _one_line(proc)
    assert not run.exists()  # the corrected rerun is not blocked


@pytest.mark.parametrize(
    ("uri", "match"),
    [
        ("sqlite:///{tmp}", "is a folder"),
        ("sqlite:///{tmp}/a-file/m.db", "a-file is a file, not a folder"),
        ("sqlite:///{tmp}/a-file/deeper/m.db", "a-file is a file, not a folder"),
        ("sqlite:///{tmp}/", "names no database file"),
        ("ftp://host/x", "no store for ftp://"),
        ("postgresql://u@127.0.0.1:{closed}/db", "unreachable"),
    ],
)
def test_check_tracking_uri_refuses(tmp_path, uri, match):
    (tmp_path / "a-file").write_text("")
    with pytest.raises(UserError, match=match):
        check_tracking_uri(uri.format(tmp=tmp_path, closed=_closed_port()), timeout=2)


# MLflow makes a database's missing folders itself.
@pytest.mark.parametrize("uri", ["sqlite:///{tmp}/m.db", "sqlite:///{tmp}/new/deeper/m.db",
                                 "{tmp}/mlruns", "file://{tmp}/mlruns"])  # fmt: skip
def test_check_tracking_uri_accepts(tmp_path, uri):
    check_tracking_uri(uri.format(tmp=tmp_path))
