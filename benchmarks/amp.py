"""Mixed precision against fp32: peak memory of a training step and steps per second, side
by side in one run (the articles' claim: AMP roughly halves activation memory and, on
hardware with fast low-precision math, trains faster).

What is measured
----------------
Both sides train the same small decoder-only transformer language model
(``benchmarks/_tiny_lm.py``, as ``benchmarks/memory.py``: 4 pre-norm blocks, width 128,
sequences of 128 tokens, batch 16) on random tokens through the engine,
``trainwell.fit(cfg, model=..., train_data=..., step_fn=...)``: AdamW, a constant learning
rate, one epoch, no validation, the doctor off. **fp32** is ``train.precision=fp32``;
**bf16** is ``train.precision=bf16`` (autocast; on CUDA also **fp16**, with the
GradScaler). Memory is one forward and backward under that side's autocast: the most bytes
of tensors alive at once (activations, gradients; weights and batch excluded), and on CUDA
the allocator's peak. Speed is steps/s over interleaved repeats (the first and the last
step of each run left out), and the typical (median) step on the CPU.

On a CPU without native bf16 (no AVX-512 BF16 or AMX) bf16 is emulated and slower than
fp32: that is why ``train.precision=auto`` keeps fp32 there; ``trainwell env`` says which
CPU this is.

Run::

    python benchmarks/amp.py              # a few minutes on a 2-core CPU
    python benchmarks/amp.py --quick      # a smoke run of a few seconds

The last lines read ``ratio (bf16 / fp32, peak memory): ..`` and ``ratio (bf16 / fp32,
steps/s): ..``. Speed is measured here, never asserted.
"""

from __future__ import annotations

import argparse
import gc
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
from memory import DEFAULT, QUICK, step_memory

import trainwell
from trainwell.engine.distributed.placement import resolve_device
from trainwell.env import cpu_has_fast_bf16

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def sides_for(device: torch.device) -> list[str]:
    return ["fp32", "bf16", "fp16"] if device.type == "cuda" else ["fp32", "bf16"]


def amp_memory(side: str, size: Size, device: torch.device) -> dict[str, float]:
    """Peak MiB of one forward and backward under the side's autocast."""
    from _tiny_lm import make_model

    model = make_model(size).to(device)
    if side == "fp32":
        return step_memory(model, size, device)
    with torch.autocast(device.type, dtype=_DTYPES[side]):
        return step_memory(model, size, device)


def measure(args: argparse.Namespace, size: Size, device: torch.device, tmp: Path):
    sides = sides_for(device)
    rates: dict[str, list[Timing]] = {s: [] for s in sides}
    memory = {s: amp_memory(s, size, device) for s in sides}
    dirs = (tmp / f"run-{i}" for i in range(10**9))

    def run(side: str, steps: int) -> Timing:
        gc.collect()
        return fit_run(size, steps, next(dirs), device, [f"train.precision={side}"]).timing

    if not args.quick:
        for side in sides:  # imports, allocator, first calls: not timed
            run(side, min(args.steps, 5))
    for r in range(args.repeats):
        for side in sides[r % len(sides) :] + sides[: r % len(sides)]:
            rates[side].append(run(side, args.steps))
    return rates, memory


def report(args, size: Size, device: torch.device, rates, memory) -> None:
    cuda = device.type == "cuda"
    print(f"trainwell {trainwell.__version__}, torch {torch.__version__}")
    native = "" if cuda else f" (native bf16: {'yes' if cpu_has_fast_bf16() else 'no'})"
    print(f"device: {device_name(device)}{native}")
    print(f"{size.describe()}; AdamW; {args.steps} steps x {args.repeats} repeats; medians")
    print()
    head = f"{'':8} {'peak tensor MiB':>16}" + (f" {'CUDA peak MiB':>14}" if cuda else "")
    print(f"{head} {'steps/s':>8} {'min-max':>11} {'typical step ms':>16}")
    for side, runs in rates.items():
        m = memory[side]
        line = f"{side:8} {m['tensors']:16.2f}" + (f" {m['cuda']:14.2f}" if cuda else "")
        rate, spread, typical = medians(runs)
        print(f"{line} {rate:8.2f} {spread:>11} {typical:>16}")
    key = "cuda" if cuda else "tensors"
    for side in [s for s in rates if s != "fp32"]:
        print(f"ratio ({side} / fp32, peak memory): {memory[side][key] / memory['fp32'][key]:.3f}")
        typical = typical_ratio(rates[side], rates["fp32"])
        if typical is not None:
            print(f"ratio ({side} / fp32, typical step speed): {typical:.3f}")
        speed = medians(rates[side])[0] / medians(rates["fp32"])[0]
        print(f"ratio ({side} / fp32, steps/s): {speed:.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=steps_arg, default=20, help="steps per timed run")
    parser.add_argument("--repeats", type=positive_int, default=3, help="timed runs per side")
    add_common_args(parser, DEFAULT)
    parser.add_argument("--quick", action="store_true", help="a smoke run: a tiny model")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.repeats = 4, 1
        args.layers, args.dim, args.heads = QUICK.layers, QUICK.dim, QUICK.heads
        args.seq, args.vocab, args.batch_size = QUICK.seq, QUICK.vocab, QUICK.batch
    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    size = size_from(args)
    with tempfile.TemporaryDirectory(prefix="trainwell-bench-") as tmp:
        rates, memory = measure(args, size, device, Path(tmp))
    report(args, size, device, rates, memory)
    return 0


if __name__ == "__main__":
    sys.exit(main())
