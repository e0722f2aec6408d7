"""Helpers of the tests/test_procs_*.py files: real processes, their children, a lock holder."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import REPO

PY = sys.executable
# A tiny classification run; long enough (epochs) to be killed while it trains.
TINY = [
    "data.name=synthetic",
    "data.kwargs.num_samples=256",
    "data.kwargs.shape=[8]",
    "data.kwargs.num_classes=4",
    "data.batch_size=32",
    "model.name=mlp",
    "model.kwargs.hidden=[16]",
    "doctor.enabled=false",
    "train.precision=fp32",
]


def env_for(cwd: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + str(cwd), **extra}


def start(args: list[str], cwd: Path, **kw) -> subprocess.Popen:
    """``python -m trainwell ARGS`` in a session of its own (a process group to kill)."""
    return subprocess.Popen([PY, "-m", "trainwell", *args], cwd=cwd, env=env_for(cwd),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, **kw)  # fmt: skip


def children(pid: int) -> list[int]:
    """The live direct children of ``pid`` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_for(predicate, timeout: float, every: float = 0.1) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(every)
    return predicate()


def saved_step(folder: Path) -> int:
    """The newest step a run has checkpointed (its ``step-N.pt`` files); 0 before any.
    Kill tests wait for it: counted work, where a sleep could outlast a fast run."""
    return max((int(p.stem.split("-")[1]) for p in folder.glob("step-*.pt")), default=0)


def logged_step(csv: Path) -> int:
    """The newest step a run has logged a training row for in ``csv`` (its metrics.csv;
    complete lines only); 0 before any."""
    try:
        text = csv.read_text()
    except FileNotFoundError:
        return 0
    lines = text.splitlines()[1:]  # after the header
    if not text.endswith("\n"):
        lines = lines[:-1]  # a line being written
    return max((int(row.split(",")[0]) for row in lines if ",train," in row), default=0)


def wait_for_step(
    proc: subprocess.Popen, run: Path, kind: str, step: int, timeout: float = 120
) -> bool:
    """Wait until the run in ``run`` has ``kind`` ("saved": a checkpoint, "logged": a
    training row) a step at or past ``step``; False if ``proc`` ended first or the time ran
    out. Polled every 2 ms, so a kill sent next lands within a step or two of it."""
    progress = {"saved": lambda: saved_step(run / "checkpoints"),
                "logged": lambda: logged_step(run / "metrics.csv")}[kind]  # fmt: skip
    end = time.monotonic() + timeout
    while time.monotonic() < end and proc.poll() is None:
        if progress() >= step:
            return True
        time.sleep(0.002)
    return False


def gone_within(pids: list[int], timeout: float) -> list[int]:
    """The pids still alive after ``timeout`` seconds (each is then killed)."""
    wait_for(lambda: not any(alive(p) for p in pids), timeout)
    left = [p for p in pids if alive(p)]
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, 9)
    return left


def hold_lock(folder: Path) -> subprocess.Popen:
    """Another process that holds ``folder``'s run lock until killed."""
    code = ("import sys, time; from pathlib import Path; from "
            "trainwell.engine.run_dir.run_lock import "
            "RunLock; lock = RunLock.acquire(Path(sys.argv[1])); print('held', flush=True); "
            "time.sleep(600)")  # fmt: skip
    proc = subprocess.Popen([PY, "-c", code, str(folder)], env=env_for(folder.parent),
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout.readline().strip() == "held"
    return proc
