"""Steps per second of training a small transformer with ``train.compile=true``, next to
eager, and what the compilation costs.

What is measured
----------------
Both sides train the same model with the same data through the engine,
``trainwell.fit(cfg, model=..., train_data=..., step_fn=...)``: a small decoder-only
transformer language model (``benchmarks/_tiny_lm.py``: token and position embeddings,
pre-norm blocks of causal self-attention and a 4x GELU MLP; by default 4 layers of width
64, sequences of 64 tokens, batch 16) on random tokens, next-token cross-entropy, AdamW,
fp32, a constant learning rate, one epoch, no validation, the doctor off.

- **eager**: the engine's defaults.
- **compiled**: the same with ``train.compile=true`` (``--mode`` sets
  ``train.compile_mode``): the engine runs the step through ``torch.compile``
  (TorchInductor); compilation happens in the first step.

Steps/s is timed from the end of the first step to the end of the last but one (a
callback at ``on_step_end``; see ``benchmarks/_tiny_lm.py``), so the first step, where
compilation happens, is out of the figure on both sides, as it is out of the engine's step
times (and so is the last, which holds the run's one log point).
On the CPU, the typical step, the median time between two step ends, is shown beside it:
the steady state, free of the bursts of a busy machine (its ratio is printed too).
The compile time is the engine's own figure, ``summary.json``'s ``compile_s`` (the first
compiled step, compilation and all). Inductor keeps what it compiled in an on-disk cache,
so that compiling the same model again is fast; the benchmark points that cache at an
empty temporary folder, so the first compile (in the warm-up) is cold, as on a user's first
run, and the later ones reuse it (``torch._dynamo.reset()`` before each compiled run, so
each compiles again), as on a user's next runs. Both are printed, with the break-even: the
steps after which the cold compile has paid for itself.

Runs alternate (eager, compiled, the order swapped each repeat) after a warm-up run of
each, so that machine noise hits both sides alike; the table gives the median of each and
the ratio of the medians. On a CPU, torch uses one thread by default here (``--threads``);
with CUDA (``--device auto``, the default, takes it when there) the same runs go to the GPU.
Run directories and the compile cache go to a temporary folder that is removed afterwards.

How to run
----------
::

    python benchmarks/compile.py            # two to three minutes on a 2-core CPU
    python benchmarks/compile.py --quick    # a smoke run: one compile of a tiny model
    python benchmarks/compile.py --steps 200 --layers 6 --dim 256 --mode max-autotune

The last line reads ``ratio (compiled / eager, steps/s): 1.10``. Speed is measured here,
never asserted.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
from pathlib import Path

import torch
from _tiny_lm import (
    Size,
    Timing,
    add_common_args,
    device_name,
    fit_run,
    medians,
    positive_int,
    size_from,
    steps_arg,
    typical_ratio,
)

import trainwell
from trainwell.engine.distributed.placement import resolve_device

EAGER = "eager"
COMPILED = "compiled (compile excluded)"
SIDES = (EAGER, COMPILED)
DEFAULT = Size(layers=4, dim=64, heads=4, seq=64, vocab=256, batch=16)
QUICK = Size(layers=1, dim=32, heads=2, seq=16, vocab=64, batch=4)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Steps/s of trainwell.fit with train.compile=true next to eager."
    )
    parser.add_argument("--steps", type=steps_arg, default=80, help="steps per run")
    parser.add_argument("--repeats", type=positive_int, default=7, help="timed runs per side")
    parser.add_argument("--mode", default="default", help="train.compile_mode")
    add_common_args(parser, DEFAULT)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run: a tiny model, 6 steps, one run per side, no warm-up, and "
        "Inductor's compile cache as found (not an empty one)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.repeats = 6, 1
        args.layers, args.dim, args.heads = QUICK.layers, QUICK.dim, QUICK.heads
        args.seq, args.vocab, args.batch_size = QUICK.seq, QUICK.vocab, QUICK.batch
    return args


class Bench:
    """The runs of one benchmark: rates per side, compile times in the order they came."""

    def __init__(self, args: argparse.Namespace, size: Size, device: torch.device) -> None:
        self.args, self.size, self.device = args, size, device
        self.runs: dict[str, list[Timing]] = {side: [] for side in SIDES}
        self.compile_s: list[float] = []

    def run(self, side: str, steps: int, run_dir: Path) -> Timing:
        gc.collect()
        extra = []
        if side == COMPILED:
            torch._dynamo.reset()  # compile again, as a new process would (its cache kept)
            extra = ["train.compile=true", f"train.compile_mode={self.args.mode}"]
        run = fit_run(self.size, steps, run_dir, self.device, extra)
        if side == COMPILED:
            # A model that does not compile trains eager: that would time eager twice.
            failed = [ln for ln in run.output.splitlines() if "did not compile" in ln]
            if failed or not run.summary.get("compile_s"):
                raise SystemExit(failed[0] if failed else "no compile time in summary.json")
            self.compile_s.append(float(run.summary["compile_s"]))
        return run.timing

    def measure(self, tmp: Path) -> None:
        run_dirs = (tmp / f"run-{i}" for i in range(10**9))
        if not self.args.quick:
            for side in SIDES:  # imports, allocator, the cold compile: not counted
                self.run(side, min(self.args.steps, 10), next(run_dirs))
        for r in range(self.args.repeats):
            # Swapped order, so that neither side always runs right after the other.
            for side in SIDES[r % 2 :] + SIDES[: r % 2]:
                self.runs[side].append(self.run(side, self.args.steps, next(run_dirs)))


def report(bench: Bench) -> None:
    args, median = bench.args, statistics.median
    print(f"trainwell {trainwell.__version__}, torch {torch.__version__}")
    print(f"device: {device_name(bench.device)}")
    print(
        f"{bench.size.describe()}; AdamW, fp32, train.compile_mode={args.mode}; "
        f"{args.steps} steps x {args.repeats} repeats"
        f"{'' if args.quick else ' after a warm-up'}; medians"
    )
    print()
    print(f"{'':30} {'steps/s':>8} {'ms/step':>8} {'min-max':>13} {'typical step ms':>16}")
    for side in SIDES:
        m, spread, typical = medians(bench.runs[side])
        print(f"{side:30} {m:8.2f} {1e3 / m:8.2f} {spread:>13} {typical:>16}")
    eager, compiled = (medians(bench.runs[side])[0] for side in SIDES)
    cold, warm = bench.compile_s[0], bench.compile_s[1:]
    print()
    if args.quick:
        print(f"compile time (Inductor's cache as found): {cold:.1f} s")
    else:
        print(f"compile time, cold (the first, an empty Inductor cache): {cold:.1f} s")
    if warm:
        print(f"compile time, warm (median of {len(warm)}, the cache of the first): "
              f"{median(warm):.1f} s")  # fmt: skip
    saved = 1 / eager - 1 / compiled  # seconds per step
    if saved > 0:
        print(f"break-even: the first compile pays for itself after {cold / saved:.0f} steps")
    else:
        print("break-even: never at this size (compiled steps are not faster)")
    typical = typical_ratio(bench.runs[COMPILED], bench.runs[EAGER])
    if typical is not None:
        print(f"ratio (compiled / eager, typical step speed): {typical:.3f}")
    print(f"ratio (compiled / eager, steps/s): {compiled / eager:.3f}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    bench = Bench(args, size_from(args), device)
    before = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="trainwell-bench-") as tmp:
        # Inductor reads this variable whenever it looks for its cache: an empty one makes
        # the first compile cold, whatever ran on this machine before. A smoke run keeps
        # the cache as it finds it: a cold compile alone takes 30-50 s on a small CPU.
        if not args.quick:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(Path(tmp) / "inductor-cache")
        try:
            bench.measure(Path(tmp))
        finally:
            if before is None:
                os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
            else:
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = before
    report(bench)
    return 0


if __name__ == "__main__":
    sys.exit(main())
