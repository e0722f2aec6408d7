"""The speed benchmarks (issue 15) run in their quick mode and print their figures:
``benchmarks/compile.py``, ``benchmarks/memory.py`` and the Lightning side of
``benchmarks/overhead.py``. Speed is measured, never asserted: the ratios need only parse
as positive numbers."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from torch._inductor.runtime.cache_dir_utils import default_cache_dir

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
HAS_LIGHTNING = importlib.util.find_spec("lightning") is not None


def run_quick(tmp_path: Path, argv: list[str], timeout: float, **env: str) -> str:
    """Run a benchmark's quick mode with ``argv`` (after the interpreter); return its
    output, once it exited cleanly and left nothing in its folder or temporary folder."""
    cwd, tmp = tmp_path / "cwd", tmp_path / "tmp"
    cwd.mkdir()
    tmp.mkdir()
    proc = subprocess.run(
        [sys.executable, *argv, "--quick"],
        cwd=cwd,
        env={**os.environ, "TMPDIR": str(tmp), **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert list(cwd.iterdir()) == [], "the benchmark must leave nothing in its folder"
    left = [p for p in tmp.iterdir() if not p.name.startswith("torchinductor_")]
    assert left == [], "the benchmark must remove its temporary files"
    return proc.stdout


def ratio(out: str, name: str) -> float:
    match = re.search(rf"^ratio \({re.escape(name)}\): (\d+(?:\.\d+)?)$", out, re.M)
    assert match, out
    value = float(match.group(1))
    assert value > 0, out
    return value


def assert_device_line(out: str) -> None:
    assert re.search(r"^device: (CPU: .+|CUDA: .+)$", out, re.M), out


@pytest.mark.slow
def test_compile(tmp_path: Path) -> None:
    # Inductor's own cache, where it would be without the test's TMPDIR: a cold compile
    # takes 30-50 s on a small CPU, a warm one a few (the quick mode keeps the cache as
    # it finds it; the full mode measures a cold compile in an empty one).
    cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or default_cache_dir()
    out = run_quick(tmp_path, [str(BENCHMARKS / "compile.py")], 240,
                    TORCHINDUCTOR_CACHE_DIR=cache)  # fmt: skip
    assert_device_line(out)
    assert re.search(r"^compile time .*: \d+\.\d s$", out, re.M), out
    for side in ("eager", "compiled (compile excluded)"):
        assert re.search(rf"^{re.escape(side)} +\d+\.\d+ ", out, re.M), out
    ratio(out, "compiled / eager, steps/s")
    assert out.rstrip().splitlines()[-1].startswith("ratio (compiled / eager, steps/s)")


@pytest.mark.slow
def test_memory(tmp_path: Path) -> None:
    out = run_quick(tmp_path, [str(BENCHMARKS / "memory.py")], 120)
    assert_device_line(out)
    assert "process peak RSS:" in out, out
    # Not speed but a count: checkpointing the blocks keeps fewer tensors, on any machine.
    assert ratio(out, "checkpointed / plain, peak memory") < 1
    ratio(out, "checkpointed / plain, steps/s")
    assert out.rstrip().splitlines()[-1].startswith("ratio (checkpointed / plain, steps/s)")


@pytest.mark.slow
def test_overhead_with_lightning_or_its_skip_line(tmp_path: Path) -> None:
    out = run_quick(tmp_path, [str(BENCHMARKS / "overhead.py"), "--model", "mlp"], 180)
    ratio(out, "trainwell / hand-written, steps/s")
    ratio(out, "trainwell / hand-written + last.pt, steps/s")
    assert re.search(r"^hand-written \+ last\.pt +\d+\.\d ", out, re.M), out
    if HAS_LIGHTNING:
        assert re.search(r"^Lightning Trainer +\d+\.\d ", out, re.M), out
        ratio(out, "trainwell / Lightning, steps/s")
    else:
        assert "Lightning side skipped: lightning is not installed" in out, out


@pytest.mark.slow
def test_stack_depth(tmp_path: Path) -> None:
    out = run_quick(tmp_path, [str(BENCHMARKS / "stack_depth.py")], 180)
    assert re.search(r"^ +12 +\d+ +\d+ +\d+$", out, re.M), out  # the deepest quick row
    ratio(out, "trainwell, no room, worst depth / median depth, steps/s")
    assert out.rstrip().splitlines()[-1].startswith(
        "ratio (trainwell (lean), worst depth / median depth, steps/s)"
    )
    ratio(out, "trainwell (lean), worst depth / median depth, steps/s")


@pytest.mark.slow
def test_epoch_end(tmp_path: Path) -> None:
    out = run_quick(tmp_path, [str(BENCHMARKS / "epoch_end.py")], 180)
    for side in ("hand-written loop", "hand + sleep", "hand + last.pt", "trainwell (lean)"):
        assert re.search(rf"^{re.escape(side)} +\d+\.\d +\d+-\d+ +\d\.\d{{3}}$", out, re.M), out
    ratio(out, "hand + last.pt / hand-written, steps/s")
    assert out.rstrip().splitlines()[-1].startswith(
        "ratio (trainwell (lean) / hand + last.pt, steps/s)"
    )
    ratio(out, "trainwell (lean) / hand + last.pt, steps/s")


def test_overhead_says_the_lightning_side_is_skipped_without_lightning(monkeypatch, capsys):
    # lightning hidden (a None entry in sys.modules makes find_spec answer None), as where
    # the bench extra is not installed; the ratios printed from made-up timings (a full
    # run of the benchmark is the test above). In this process: the benchmark's modules
    # imported afresh with lightning hidden, and forgotten afterwards.
    fresh = ("overhead", "_lightning_side", "_eval_side", "_tiny_lm")
    monkeypatch.setitem(sys.modules, "lightning", None)
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    saved = {name: sys.modules.pop(name) for name in fresh if name in sys.modules}
    try:
        overhead = importlib.import_module("overhead")
        assert overhead.LIGHTNING not in overhead.VARIANTS, overhead.VARIANTS
        timing = overhead.Timing(steps_time=1.0, wall=2.0, typical_step=0.01)
        timings = {v: [timing] for v in overhead.VARIANTS}
        overhead.print_ratios(argparse.Namespace(steps=10), timings)
    finally:
        for name in fresh:
            sys.modules.pop(name, None)
        sys.modules.update(saved)
    out = capsys.readouterr().out
    line = "Lightning side skipped: lightning is not installed (pip install -e '.[bench]')"
    assert line in out.splitlines(), out
    assert "trainwell / Lightning" not in out, out
    assert ratio(out, "trainwell / hand-written, steps/s") == 1.0
