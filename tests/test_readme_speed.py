"""The README's speed examples run as written."""

from __future__ import annotations

import shlex

from tests.conftest import run_subprocess
from tests.test_readme import block


def test_speed_examples_run_as_written(tmp_path):
    lines = block("bash", "trainwell bench-data").splitlines()
    outputs = []
    for line in lines:
        args = shlex.split(line)
        assert args[0] == "trainwell"
        proc = run_subprocess(args[1:], tmp_path, timeout=300)
        assert proc.returncode == 0, f"{line}\n{proc.stderr[-2000:]}"
        outputs.append(proc.stdout)
    bench, profile, train = outputs
    assert "recommended" in bench.lower() and "bound" in bench
    assert "trace.json" in profile and "aten::" in profile
    assert "profiled" in train
    runs = sorted((tmp_path / "runs").iterdir())
    assert any((run / "trace.json").exists() and (run / "metrics.csv").exists() for run in runs)
