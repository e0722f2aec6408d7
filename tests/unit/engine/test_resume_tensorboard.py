"""A tensorboard/ folder that cannot be written on resume: one line, the logger is
switched off, training goes on, and a completed run stays completed (no thread traceback).
Root's chmod blocks nothing, so the read-only folder comes from tests/io_faults.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import io_faults
from tests.conftest import REPO, SYNTHETIC, read_summary
from tests.finished_run import finished_run_fixture, run_copy_fixture

pytest.importorskip("tensorboard")

RUN = [*SYNTHETIC, "train.epochs=2", "checkpoint.every_steps=5", "log.tensorboard=true"]


finished = finished_run_fixture("tb", RUN)


run = run_copy_fixture()


def resume(run: Path, cwd: Path, kind: str, *extra: str) -> subprocess.CompletedProcess:
    rules = [{"path": str(run / "tensorboard"), "kind": kind}]
    return subprocess.run(
        [sys.executable, "-m", "trainwell", "train", *RUN, f"run.dir={run}", *extra,
         "--resume", "auto"],
        cwd=cwd, env=io_faults.env(rules, {**os.environ, "PYTHONPATH": str(REPO)}),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kind", "extra"),
    [("readonly-dir", []), ("readonly-dir", ["train.epochs=3"]), ("deny-dir", ["train.epochs=3"])],
)
def test_an_unwritable_tensorboard_folder_is_one_line_and_the_run_goes_on(run, tmp_path, kind,
                                                                          extra):  # fmt: skip
    events = sorted(p.name for p in (run / "tensorboard").iterdir())
    proc = resume(run, tmp_path, kind, *extra)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "Exception in thread" not in proc.stderr
    said = [line for line in proc.stdout.splitlines() if "logger tensorboard" in line]
    assert len(said) == 1
    assert "switched off, training goes on" in said[0] and "[Errno 13]" in said[0]
    assert str(run / "tensorboard") in said[0]
    summary = read_summary(run)
    assert summary["status"] == "completed" and "error" not in summary
    assert summary["steps"] == (42 if extra else 28)
    assert sorted(p.name for p in (run / "tensorboard").iterdir()) == events  # untouched


def test_a_write_failing_mid_run_reaches_the_next_call_not_stderr(tmp_path, capfd, monkeypatch):
    import builtins
    import io as io_module
    import time

    from trainwell.loggers.base import Loggers
    from trainwell.loggers.tb import TensorBoardLogger

    for module, name in [(builtins, "open"), (io_module, "open"), (os, "open")]:
        monkeypatch.setattr(module, name, getattr(module, name))
    said: list[str] = []
    tb = TensorBoardLogger(tmp_path / "tensorboard")
    loggers = Loggers([("tensorboard", tb)], say=said.append)
    loggers.log_metrics(1, {"train/loss": 1.0})
    loggers.flush()
    io_faults.install([{"path": str(tmp_path / "tensorboard"), "kind": "readonly-dir"}])
    loggers.log_metrics(2, {"train/loss": 0.5})
    time.sleep(0.2)
    for step in range(3, 6):  # the thread's error reaches one of these calls
        loggers.log_metrics(step, {"train/loss": 0.1})
        loggers.flush()
    assert len(said) == 1 and "logger tensorboard failed" in said[0], said
    assert loggers.names == []
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception in thread" not in err
