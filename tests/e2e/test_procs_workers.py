"""Workers of ``trainwell train --nproc 2`` die with their launcher (issue 25, item 3).

Real torchrun launches on gloo, real SIGKILLs: to the launcher alone, to its whole
process group, and to a launcher whose workers are still setting up. Also the guard by
itself, in a plain parent and child without torch.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import time

import pytest
import torch

from tests.procs_helpers import PY, TINY, alive, children, env_for, gone_within, start, wait_for

pytestmark = pytest.mark.skipif(
    not torch.distributed.is_available(), reason="torch.distributed is not built in"
)

LONG = [*TINY, "train.epochs=100000", "checkpoint.every_steps=50"]


def _launch_and_wait(tmp_path, until_training: bool):
    run = tmp_path / "run"
    proc = start(["train", "--nproc", "2", *LONG, f"run.dir={run}"], cwd=tmp_path)
    ready = (lambda: (run / "summary.json").exists()) if until_training else (lambda: True)
    assert wait_for(lambda: len(children(proc.pid)) == 2 and ready(), 120), proc.pid
    workers = children(proc.pid)
    assert len(workers) == 2
    return proc, workers, run


def _kill(proc, workers, how):
    if how == "group":
        os.killpg(proc.pid, signal.SIGKILL)
    else:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    proc.stdout.close()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["launcher", "group"])
def test_sigkill_of_the_launcher_ends_its_workers_and_a_restart_is_not_refused(cli, tmp_path, how):
    proc, workers, run = _launch_and_wait(tmp_path, until_training=True)
    time.sleep(1.0)  # training steps, not set-up
    _kill(proc, workers, how)
    left = gone_within(workers, 15)
    assert not left, f"workers {left} outlived the launcher (SIGKILL to the {how})"
    # They stopped the graceful way: the run says it was interrupted, and is free to resume.
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] in ("interrupted", "running"), summary.get("error")
    # A restart after the kill is not refused by an orphan holding the run's lock (the
    # restart itself need not be a process of its own: the lock is the workers').
    _, _, err = cli("train", *TINY, "train.epochs=1", f"run.dir={run}", "--resume", "auto")
    assert "in use by another" not in err, err[-2000:]


@pytest.mark.slow
def test_sigkill_while_workers_set_up_ends_them_too(tmp_path):
    proc, workers, _ = _launch_and_wait(tmp_path, until_training=False)
    _kill(proc, workers, "launcher")
    assert not gone_within(workers, 15)


PARENT = textwrap.dedent(
    """
    import os, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", sys.argv[1]],
                             env={**os.environ, "TRAINWELL_LAUNCHER_PID": str(os.getpid())})
    print(child.pid, flush=True)
    time.sleep(600)
    """
)
CHILD = textwrap.dedent(
    """
    import time
    from trainwell.engine.distributed.worker_guard import die_with_launcher
    die_with_launcher()
    time.sleep(600)
    """
)


@pytest.mark.slow
def test_the_guard_alone_kills_a_child_whose_parent_was_sigkilled(tmp_path):
    parent = subprocess.Popen([PY, "-c", PARENT, CHILD], env=env_for(tmp_path),
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    child = int(parent.stdout.readline())
    time.sleep(1.5)  # the child is guarded by now
    assert alive(child)
    parent.kill()
    parent.wait()
    assert not gone_within([child], 10)


@pytest.mark.slow
def test_a_worker_whose_launcher_is_already_gone_does_not_start(tmp_path):
    dead = subprocess.Popen([PY, "-c", "pass"])
    dead.wait()  # a pid that no longer runs: this child's launcher died before it started
    proc = subprocess.run([PY, "-c", CHILD], env=env_for(tmp_path, TRAINWELL_LAUNCHER_PID=str(
        dead.pid)), capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert "launcher ended" in proc.stderr


@pytest.mark.slow
def test_a_process_outside_any_launcher_is_left_alone(tmp_path):
    code = CHILD.replace("time.sleep(600)", "print('fine')")
    proc = subprocess.run([PY, "-c", code], env=env_for(tmp_path), capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.strip() == "fine", proc.stderr
