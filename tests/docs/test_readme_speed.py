"""The README's speed examples run as written."""

from __future__ import annotations

import pytest

from tests.docs.test_readme import run_commands


@pytest.mark.slow
def test_speed_examples_run_as_written(tmp_path):
    bench, profile, train = run_commands("trainwell bench-data", tmp_path)
    assert "recommended" in bench.lower() and "bound" in bench
    assert "trace.json" in profile and "aten::" in profile
    assert "profiled" in train
    runs = sorted((tmp_path / "runs").iterdir())
    assert any((run / "trace.json").exists() and (run / "metrics.csv").exists() for run in runs)
