"""What the work between two epochs costs the training steps after it: the hand-written
loop alone, the same loop doing a little between its epochs, and trainwell's lean ``fit``.

Why
---
``benchmarks/overhead.py`` times only the training steps: trainwell's end-of-epoch work
(``last.pt`` and ``best.pt``, the metrics flush) is left out of its time, and the
hand-written loop does nothing between its epochs. But the steps *after* that work run
slower on this kind of machine (a 2-core VM) for a while: measured here, the hand-written
loop itself loses a few percent of steps/s when it writes a checkpoint between epochs,
or merely sleeps a few milliseconds, out of its timing as trainwell's. On the digits
(19 steps an epoch) that is paid every 19 steps. This script shows how much, so that
``overhead.py``'s ratio can be read apart from it.

Sides (``overhead.py``'s model, data, optimizer and timing; ``--model mlp`` by default):

- **hand-written loop**: ``overhead.py``'s ``run_hand``, nothing between epochs.
- **hand + sleep**: the same, sleeping ``--sleep-ms`` between epochs (no work at all).
- **hand + last.pt**: the same, writing ``{"model", "optimizer"}`` state dicts to
  ``last.pt`` between epochs the careful way (a temporary file, fsync, rename), as a
  training script that can resume does.
- **trainwell (lean)**: ``overhead.py``'s lean ``fit`` (it writes ``best.pt`` and
  ``last.pt`` at each epoch's end).

Every side runs in turn, the order rotated each repeat, after a warm-up run of each;
medians. Speed is measured here, never asserted.

How to run
----------
::

    python benchmarks/epoch_end.py              # about 20 seconds on a 2-core CPU
    python benchmarks/epoch_end.py --quick      # a smoke run

The last line reads ``ratio (trainwell (lean) / hand + last.pt, steps/s): ..``: lean
trainwell next to a hand-written loop that checkpoints each epoch as it does.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import overhead as bench
import torch
from torch.utils.data import TensorDataset

from trainwell.data.digits import load_digits_splits

HAND, SLEEP, CKPT, LEAN = "hand-written loop", "hand + sleep", "hand + last.pt", "trainwell (lean)"
SIDES = (HAND, SLEEP, CKPT, LEAN)


def sides(args: argparse.Namespace, train: TensorDataset, tmp: Path) -> dict[str, Callable]:
    runs = (tmp / f"run-{i}" for i in range(10**9))
    sleep_s = args.sleep_ms / 1000
    def hand(between: Callable[..., None] | None) -> Callable[[int], float]:
        return lambda n: n / bench.run_hand(train, n, 64, between=between).steps_time

    return {
        HAND: hand(None),
        SLEEP: hand(lambda m, o: time.sleep(sleep_s)),
        CKPT: hand(lambda m, o: bench.save_last(tmp / "last.pt", m, o)),
        LEAN: lambda n: n / bench.run_trainwell(train, n, 64, next(runs), True).steps_time,
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=bench.positive_int, default=400, help="steps per run")
    parser.add_argument("--repeats", type=bench.positive_int, default=7, help="runs per side")
    parser.add_argument("--model", choices=["cnn", "mlp"], default="mlp")
    parser.add_argument("--sleep-ms", type=float, default=2.5, help="hand + sleep's pause")
    parser.add_argument("--quick", action="store_true", help="a smoke run (40 steps, 2 repeats)")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.repeats = 40, 2
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    bench.MODEL = args.model
    torch.set_num_threads(1)
    train, _, _ = load_digits_splits()
    rates: dict[str, list[float]] = {side: [] for side in SIDES}
    with tempfile.TemporaryDirectory(prefix="trainwell-bench-") as tmp:
        run = sides(args, train, Path(tmp))
        for side in SIDES:  # warm-up: imports, allocator, first calls
            run[side](min(args.steps, 38))
        for r in range(args.repeats):
            for side in SIDES[r % len(SIDES) :] + SIDES[: r % len(SIDES)]:
                gc.collect()
                rates[side].append(run[side](args.steps))
    median = {side: statistics.median(v) for side, v in rates.items()}
    print(f"{args.model} on the digits ({len(train) // 64} steps/epoch), batch 64, 1 thread, "
          f"{args.steps} steps x {args.repeats} repeats; medians")  # fmt: skip
    print(f"{'':22} {'steps/s':>8} {'min-max':>10} {'vs hand':>8}")
    for side in SIDES:
        spread = f"{min(rates[side]):.0f}-{max(rates[side]):.0f}"
        print(f"{side:22} {median[side]:8.1f} {spread:>10} {median[side] / median[HAND]:8.3f}")
    print(f"ratio (hand + sleep {args.sleep_ms:g} ms / hand-written, steps/s): "
          f"{median[SLEEP] / median[HAND]:.3f}")  # fmt: skip
    print(f"ratio (hand + last.pt / hand-written, steps/s): {median[CKPT] / median[HAND]:.3f}")
    print(f"ratio (trainwell (lean) / hand-written, steps/s): {median[LEAN] / median[HAND]:.3f}")
    print(f"ratio (trainwell (lean) / hand + last.pt, steps/s): {median[LEAN] / median[CKPT]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
