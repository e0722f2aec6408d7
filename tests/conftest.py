"""Shared test helpers: run the real CLI, in-process or as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# One intra-op thread in every test process and the processes they start (set before torch
# is imported; a child inherits it): the suite runs two workers, and their subprocesses, on
# two cores, and torch's default of a thread per core made the OpenMP threads of several
# processes spin against each other. A tiny in-process run took 9.8 s of CPU and 30 s on a
# loaded machine with 2 threads, 1.2 s and 4.6 s with one. A test about threads sets its own.
os.environ.setdefault("OMP_NUM_THREADS", "1")
if "torch" in sys.modules:  # imported before this file (a plugin): set it there too
    sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
# Inductor compiles in a pool of one process per core by default: two more processes that
# import torch, on cores the other workers already fill. One thread compiles in the process
# itself: benchmarks/compile.py --quick (then 2 layers) took 51 s of CPU with the pool, 37 s
# without.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

from trainwell.cli import main  # noqa: E402

REPO = Path(__file__).resolve().parent.parent

# A small, fast run: synthetic data (8 features, 4 classes), an MLP, 14 steps per epoch.
SYNTHETIC = [
    "data.name=synthetic",
    "data.kwargs.num_samples=512",
    "data.kwargs.shape=[8]",
    "data.kwargs.num_classes=4",
    "data.batch_size=32",
    "model.name=mlp",
    "model.kwargs.hidden=[32]",
]


@pytest.fixture
def cli(tmp_path, monkeypatch, capsys):
    """Run ``trainwell ARGS`` in-process from ``tmp_path``; returns (code, stdout, stderr)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))

    def run(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    return run


def run_subprocess(
    args: list[str], cwd: Path, timeout: float = 120, **kw
) -> subprocess.CompletedProcess:
    """Run ``python -m trainwell ARGS`` as a real process."""
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + str(cwd)}
    return subprocess.run(
        [sys.executable, "-m", "trainwell", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        **kw,
    )


def is_machine_metric(name: str) -> bool:
    """Rows that describe the machine (memory, timings, throughput), not the model: their
    values differ between two runs of the same seed."""
    return name == "samples_per_s" or name.startswith(("mem/", "time/"))


def model_csv(path: Path) -> str:
    """metrics.csv without the machine's rows: what two identical runs must agree on."""
    lines = Path(path).read_text().splitlines(keepends=True)
    return "".join(line for line in lines if not is_machine_metric(line.split(",")[3]))


def read_summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def completed_runs(root: Path) -> list[Path]:
    """Run directories under ``root`` whose summary says completed."""
    return [
        p.parent
        for p in root.rglob("summary.json")
        if read_summary(p.parent)["status"] == "completed"
    ]
