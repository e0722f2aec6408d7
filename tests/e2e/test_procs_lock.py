"""Only the lock holder writes a run's files (issue 25, item 5), and a run whose process
died without a word is shown stopped, not running (item 10). Real processes hold the
locks; a real training run is SIGKILLed."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from tests.procs_helpers import PY, TINY, env_for, hold_lock, start, wait_for
from trainwell.engine.run.launch_run_dir import settle_failed_launch
from trainwell.engine.run_dir.run_lock import RunLock
from trainwell.flock import lock_state
from trainwell.report.runs import list_runs

RUNNING = {"status": "running", "started": "2026-12-02T00:00:00+0000", "steps": 3}


def _live_looking_run(folder):
    folder.mkdir(parents=True)
    (folder / "checkpoints").mkdir()
    (folder / "summary.json").write_text(json.dumps(RUNNING))
    (folder / "metrics.csv").write_text("step,epoch,split,name,value\n")
    (folder / "config.yaml").write_text("run: {}\n")
    return (folder / "summary.json").read_bytes()


def _trainwell(tmp_path, *args, timeout=240):
    return subprocess.run([PY, "-m", "trainwell", *args], cwd=tmp_path, env=env_for(tmp_path),
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("resume", [["--resume", "auto"], []])
def test_a_launch_refused_by_the_lock_leaves_the_live_run_alone(tmp_path, resume):
    run = tmp_path / "run"
    before = _live_looking_run(run)
    holder = hold_lock(run)
    try:
        proc = _trainwell(tmp_path, "train", "--nproc", "2", *TINY, f"run.dir={run}", *resume)
        assert proc.returncode == 2, proc.stderr[-2000:]
        errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("trainwell: error:")]
        assert len(errors) == 1, proc.stderr[-2000:]
        assert (run / "summary.json").read_bytes() == before
        assert not (run / "report.html").exists()
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow
def test_a_live_training_run_is_not_marked_failed_by_a_second_launch(tmp_path):
    run = tmp_path / "run"
    live = start(["train", *TINY, "train.epochs=100000", f"run.dir={run}"], cwd=tmp_path)
    try:
        assert wait_for(lambda: (run / "summary.json").exists(), 120)
        proc = _trainwell(tmp_path, "train", "--nproc", "2", *TINY, f"run.dir={run}",
                          "--resume", "auto")  # fmt: skip
        assert proc.returncode == 2 and "in use" in proc.stderr, proc.stderr[-2000:]
        assert json.loads((run / "summary.json").read_text())["status"] == "running"
        assert live.poll() is None
    finally:
        os.killpg(live.pid, signal.SIGKILL)
        live.wait()
        live.stdout.close()


@pytest.mark.slow
def test_settling_a_failed_launch_writes_only_with_the_lock(tmp_path):
    run = tmp_path / "run"
    before = _live_looking_run(run)
    holder = hold_lock(run)
    try:
        settle_failed_launch(run, made=False, cause="a worker process failed")
        assert (run / "summary.json").read_bytes() == before
    finally:
        holder.kill()
        holder.wait()
    # The holder is gone (as after a SIGKILL): now the launcher may say what happened.
    settle_failed_launch(run, made=False, cause="a worker process failed")
    assert json.loads((run / "summary.json").read_text())["status"] == "failed"


def test_lock_state_follows_the_holder_process(tmp_path):
    run = tmp_path / "run"
    _live_looking_run(run)
    assert lock_state(run) == "unknown"  # no lock file yet
    holder = hold_lock(run)
    assert lock_state(run) == "held"
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert lock_state(run) == "free"
    # A probe never turns a starting run away.
    RunLock.acquire(run).release()


@pytest.mark.slow
def test_a_sigkilled_run_is_shown_stopped_in_runs_and_report(tmp_path):
    runs = tmp_path / "runs"
    run = runs / "killed"
    proc = start(["train", *TINY, "train.epochs=100000", f"run.dir={run}"], cwd=tmp_path)
    assert wait_for(lambda: (run / "summary.json").exists(), 120)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    assert json.loads((run / "summary.json").read_text())["status"] == "running"  # as left

    table = _trainwell(tmp_path, "runs", str(runs))
    assert table.returncode == 0, table.stderr
    assert "stopped (no process)" in table.stdout and "running" not in table.stdout
    rows = json.loads(_trainwell(tmp_path, "runs", str(runs), "--json").stdout)
    assert rows[0]["status"] == "stopped"
    report = _trainwell(tmp_path, "report", str(run))
    assert report.returncode == 0, report.stderr
    assert "still running" not in report.stdout
    assert "no process holds the run" in report.stdout
    html = (run / "report.html").read_text()
    assert "status-stopped" in html


def test_a_live_run_is_still_shown_running(tmp_path):
    run = tmp_path / "runs" / "live"
    _live_looking_run(run)
    holder = hold_lock(run)
    try:
        assert list_runs(tmp_path / "runs")[0]["status"] == "running"
    finally:
        holder.kill()
        holder.wait()
    assert list_runs(tmp_path / "runs")[0]["status"] == "stopped"
