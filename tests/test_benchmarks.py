"""The overhead benchmark runs and reports a ratio (its speed is measured, never asserted)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "overhead.py"
RATIO = re.compile(r"^ratio \(trainwell / hand-written, steps/s\): (\d+(?:\.\d+)?)$", re.M)


def test_overhead_quick_prints_a_ratio(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick"],
        cwd=tmp_path,  # nothing may be written next to the caller
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    match = RATIO.search(proc.stdout)
    assert match, proc.stdout
    assert float(match.group(1)) > 0
    assert list(tmp_path.iterdir()) == [], "run directories must go to a temporary folder"
