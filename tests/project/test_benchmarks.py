"""Each benchmark runs in its quick mode and prints its ratio (speed is measured, never
asserted), leaving nothing behind."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def run_quick(script: str, tmp_path: Path, ratio: str, timeout: float) -> str:
    """Run ``benchmarks/<script> --quick``; return its output after the shared checks."""
    cwd, tmp = tmp_path / "cwd", tmp_path / "tmp"
    cwd.mkdir()
    tmp.mkdir()
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "--quick"],
        cwd=cwd,  # nothing may be left next to the caller
        env={**os.environ, "TMPDIR": str(tmp)},  # nor in the temporary folder
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    match = re.search(rf"^{re.escape(ratio)}: (\d+(?:\.\d+)?)$", proc.stdout, re.M)
    assert match, proc.stdout
    assert float(match.group(1)) > 0
    assert list(cwd.iterdir()) == [], "the benchmark must leave nothing in its folder"
    # torch keeps its own compile cache there (torchinductor_<user>); that is not ours.
    left = [p for p in tmp.iterdir() if not p.name.startswith("torchinductor_")]
    assert left == [], "the benchmark must remove its temporary files"
    return proc.stdout


@pytest.mark.slow
def test_checkpoint(tmp_path: Path) -> None:
    out = run_quick("checkpoint.py", tmp_path, "ratio (durable / plain torch.save)", 120)
    for variant in ("plain torch.save", "plain + fsync", "durable (save_atomic)"):
        assert variant in out, out


@pytest.mark.slow
def test_scaling(tmp_path: Path) -> None:
    out = run_quick("scaling.py", tmp_path, "ratio (2 processes / 1 process, samples/s)", 300)
    assert out.rstrip().splitlines()[-1].startswith("ratio (2 processes"), "the ratio comes last"
    for row in ("launcher, 1 process x 1 thread", "launcher, 2 processes x 1 thread",
                "in-process, 1 process x 1 thread", "launcher, 1 process x 1 thread, half batch*"
                ):  # fmt: skip
        assert row in out, out
    assert "1 process x 2 threads" not in out, "a quick run leaves the 2-thread row out"
    assert "OMP_NUM_THREADS" in out, "the thread setting must be printed"
    assert out.rstrip().splitlines()[-2].startswith("verdict: "), "the verdict before the ratio"


@pytest.mark.slow
def test_amp(tmp_path: Path) -> None:
    out = run_quick("amp.py", tmp_path, "ratio (bf16 / fp32, peak memory)", 180)
    assert "ratio (bf16 / fp32, steps/s): " in out and "native bf16: " in out


@pytest.mark.slow
def test_fsdp(tmp_path: Path) -> None:
    out = run_quick("fsdp.py", tmp_path, "ratio fsdp / ddp (training state bytes per rank)", 240)
    assert "ratio sharded / gathered (checkpoint write time)" in out
    # The arithmetic holds exactly: every parameter, gradient and moment split in two.
    assert "ratio fsdp / ddp (training state bytes per rank): 0.50" in out
