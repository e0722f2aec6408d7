"""The README's logger and callback examples run as written: the commands, the user logger,
and the TensorBoard and MLflow servers they point to (started, seen listening, stopped)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, read_summary
from tests.docs.test_readme import block, trainwell

pytest.importorskip("tensorboard", reason="CI installs trainwell[tensorboard]")
pytest.importorskip("mlflow", reason="CI installs trainwell[mlflow]")

BIN = Path(sys.executable).parent


def run_line(line: str, cwd: Path) -> subprocess.CompletedProcess:
    args = shlex.split(line.split("  #")[0])
    assert args[0] == "trainwell", line
    proc = trainwell(args[1:], cwd)
    assert proc.returncode == 0, f"{line}\n{proc.stderr[-2000:]}"
    return proc


def serve(line: str, cwd: Path, ready: str, timeout: float = 90) -> str:
    """Start a server command of the README, wait until it says ``ready``, stop it."""
    args = shlex.split(line.split("  #")[0])
    exe = BIN / args[0]
    assert exe.exists(), f"{args[0]} is not installed beside {sys.executable}"
    port = str(_free_port())
    extra = ["--port", port]
    proc = subprocess.Popen(
        [str(exe), *args[1:], *extra], cwd=cwd, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    seen = []
    try:
        deadline = time.time() + timeout
        while time.time() < deadline:
            line_out = proc.stdout.readline()
            if not line_out and proc.poll() is not None:
                break
            seen.append(line_out)
            if ready in line_out:
                return "".join(seen)
        raise AssertionError(f"{line} never said {ready!r}:\n{''.join(seen)[-2000:]}")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_the_logger_commands_run_as_written(tmp_path):
    lines = block("bash", "trainwell train train.epochs=2 log.tensorboard=true").splitlines()
    tb_run, tb_serve, ml_run, ml_serve = lines
    run_line(tb_run, tmp_path)
    (run,) = (tmp_path / "runs").iterdir()
    assert list((run / "tensorboard").glob("events.out.tfevents.*"))
    assert "http://" in serve(tb_serve, tmp_path, "http://")
    run_line(ml_run, tmp_path)
    assert (tmp_path / "mlflow.db").exists() and (tmp_path / "mlruns").is_dir()
    serve(ml_serve, tmp_path, "Uvicorn running on")


@pytest.mark.slow
def test_the_user_logger_runs_as_written(tmp_path):
    (tmp_path / "mylog.py").write_text(block("python", "# mylog.py"))
    (line,) = block("bash", "trainwell train train.epochs=2 \"log.loggers").splitlines()
    run_line(line, tmp_path)
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    (run,) = (tmp_path / "runs").iterdir()
    assert rows and rows[-1]["step"] == read_summary(run)["steps"]
    assert {"train/loss", "train/lr"} <= set(rows[0])


@pytest.mark.slow
def test_the_confusion_matrix_example_runs_as_written(tmp_path):
    import shutil

    (line,) = block("bash", "cd examples/callbacks && trainwell").splitlines()
    folder, command = line.split(" && ")
    work = tmp_path / "callbacks"
    shutil.copytree(REPO / folder.split()[1], work)
    run_line(command, work)
    (run,) = (work / "runs").iterdir()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "tensorboard"), size_guidance={"images": 0})
    acc.Reload()
    assert len(acc.Images("val/confusion_matrix")) == 3  # one per epoch of the yaml
