"""The 1-vs-2-process scaling benchmark runs and prints a ratio (measured, never asserted)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "scaling.py"
RATIO = re.compile(r"^ratio \(2 processes / 1 process, samples/s\): (\d+(?:\.\d+)?)$", re.M)


@pytest.mark.slow
def test_scaling_benchmark_quick_prints_a_ratio(tmp_path: Path) -> None:
    cwd, tmp = tmp_path / "cwd", tmp_path / "tmp"
    cwd.mkdir()
    tmp.mkdir()
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick"],
        cwd=cwd,  # nothing may be left next to the caller
        env={**os.environ, "TMPDIR": str(tmp)},  # the run directories go here
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    match = RATIO.search(proc.stdout)
    assert match, proc.stdout
    assert float(match.group(1)) > 0
    assert proc.stdout.rstrip().splitlines()[-1] == match.group(0), "the ratio comes last"
    for row in ("launcher, 1 process x 1 thread", "launcher, 2 processes x 1 thread",
                "in-process, 1 process x 1 thread", "launcher, 1 process x 2 threads"):  # fmt: skip
        assert row in proc.stdout, proc.stdout
    assert "OMP_NUM_THREADS" in proc.stdout, "the thread setting must be printed"
    assert list(cwd.iterdir()) == [], "the benchmark must leave nothing in its folder"
    assert list(tmp.iterdir()) == [], "the benchmark must remove its temporary run directories"
