"""The checkpoint-write benchmark runs and prints a ratio (measured, never asserted)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "checkpoint.py"
RATIO = re.compile(r"^ratio \(durable / plain torch\.save\): (\d+(?:\.\d+)?)$", re.M)


def test_checkpoint_benchmark_quick_prints_a_ratio(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick"],
        cwd=tmp_path,  # nothing may be left next to the caller
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    match = RATIO.search(proc.stdout)
    assert match, proc.stdout
    assert float(match.group(1)) > 0
    for variant in ("plain torch.save", "plain + fsync", "durable (save_atomic)"):
        assert variant in proc.stdout, proc.stdout
    assert list(tmp_path.iterdir()) == [], "the benchmark must remove the files it writes"
