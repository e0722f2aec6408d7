"""``trainwell runs --diff`` shows what two runs got (issue 26 §5b, §6): shared final
metrics, steps, samples/s, processes and wall time in one number format, and for runs that
differ in processes the scaling ratio with the articles' verdict (under 1.5x on 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainwell.report.outcome import scaling_verdict


def fake_run(path: Path, **summary) -> Path:
    path.mkdir(parents=True)
    (path / "summary.json").write_text(json.dumps({"status": "completed", **summary}))
    (path / "config.yaml").write_text(
        f"run:\n  dir: {path}\ndata:\n  name: digits\n  batch_size: 64\n"
    )
    (path / "metrics.csv").write_text("step,epoch,split,name,value\n")
    return path


@pytest.mark.parametrize(("one", "two", "scales"), [(1000.0, 1620.0, True),
                                                    (1000.0, 1210.5, False),
                                                    (800.0, 1200.0, True)])  # fmt: skip
def test_runs_diff_gives_the_scaling_verdict(cli, tmp_path, one, two, scales):
    a = fake_run(tmp_path / "a", world_size=1, samples_per_s=one, steps=100, wall_time_s=12.345,
                 final={"val/accuracy": 0.981234, "val/loss": 0.0612})
    b = fake_run(tmp_path / "b", world_size=2, samples_per_s=two, steps=100, wall_time_s=8.5,
                 final={"val/accuracy": 0.97, "test/accuracy": 0.9})
    code, out, _ = cli("runs", "--diff", str(a), str(b))
    assert code == 0
    lines = out.splitlines()
    assert "val/accuracy  0.9812  ->  0.97" in lines
    assert not any(ln.startswith(("val/loss", "test/accuracy")) for ln in lines)  # not shared
    assert "processes     1  ->  2" in lines and "wall s        12.35  ->  8.5" in lines
    (verdict,) = [ln for ln in lines if ln.startswith("verdict: ")]
    ratio = f"{two / one:.4g}x on 2 processes against 1"
    assert ratio in verdict and verdict.startswith("verdict: scales" if scales else
                                                   "verdict: under 1.5x")  # fmt: skip
    if not scales:
        assert "trainwell bench-data" in verdict


def test_no_verdict_when_the_processes_are_the_same_or_unknown(cli, tmp_path):
    a = fake_run(tmp_path / "a", world_size=2, samples_per_s=900.0)
    b = fake_run(tmp_path / "b", world_size=2, samples_per_s=1900.0)
    c = fake_run(tmp_path / "c")
    for x, y in ((a, b), (a, c)):
        code, out, _ = cli("runs", "--diff", str(x), str(y))
        assert code == 0 and "verdict" not in out


def test_more_processes_expect_more():
    assert scaling_verdict(2.4, processes=4).startswith("verdict: under 2.5x")
    assert scaling_verdict(3.0, processes=4).startswith("verdict: scales")
    assert scaling_verdict(1.9, processes=4, base=2).startswith("verdict: scales")
