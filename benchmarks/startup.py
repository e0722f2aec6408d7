"""Start-up: how long ``trainwell --help`` takes, and ``trainwell train``'s time to its first
line (the run's header), each the median of N cold processes, beside ``python -c pass`` and
``python -c "import torch"`` measured in the same rounds (interleaved), so that the figures
read as ratios to what no trainwell code can go below.

Run: ``python benchmarks/startup.py [--repeats 5]``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _wall(args: list[str]) -> float:
    began = time.perf_counter()
    subprocess.run(args, cwd=REPO, capture_output=True, check=True, timeout=300)
    return time.perf_counter() - began


def _first_line(run_dir: Path) -> float:
    """Seconds from the start of ``trainwell train`` to its first line of output."""
    args = [sys.executable, "-m", "trainwell", "train", "train.max_steps=1",
            f"run.dir={run_dir}"]  # fmt: skip
    began = time.perf_counter()
    proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    proc.stdout.readline()
    first = time.perf_counter() - began
    proc.stdout.read()
    proc.wait(timeout=300)
    return first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    py = sys.executable
    names = ("python -c pass", "python -c 'import torch'", "trainwell --help",
             "trainwell train: first line")  # fmt: skip
    sides: dict[str, list[float]] = {k: [] for k in names}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            sides["python -c pass"].append(_wall([py, "-c", "pass"]))
            sides["python -c 'import torch'"].append(_wall([py, "-c", "import torch"]))
            sides["trainwell --help"].append(_wall([py, "-m", "trainwell", "--help"]))
            sides["trainwell train: first line"].append(_first_line(Path(tmp) / f"run-{i}"))
    medians = {k: statistics.median(v) for k, v in sides.items()}
    torch_s = medians["python -c 'import torch'"]
    print(f"start-up, median of {args.repeats} cold processes each, interleaved")
    for name, seconds in medians.items():
        print(f"  {name:<30} {seconds:6.2f}s  ({seconds / torch_s:.2f} x import torch)")


if __name__ == "__main__":
    main()
