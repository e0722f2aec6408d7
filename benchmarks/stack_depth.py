"""Steps/s of the tiny MLP by how deep on the Python stack the training runs: the
hand-written loop, trainwell's lean ``fit``, and the same ``fit`` without its stack room.

Why
---
CPython 3.11+ keeps frames in 16 KiB chunks and maps a new chunk (then unmaps it) each time
a call crosses a chunk's end and returns. A training step that crosses one pays that every
step, and whether it does depends only on the caller's depth (see
``trainwell/engine/loop/stack_room.py``). ``fit`` runs its loop in a chunk of its own
(``call_with_room``); this script shows the three sides at call depths 0, 6, 12, ...: each
side's steps/s at every depth, and over the depths its worst, median and best.

The sides are ``benchmarks/overhead.py``'s ``hand-written loop`` and ``trainwell (lean)``
(same model, data, optimizer and timing), each called under ``depth`` nested Python calls;
``trainwell, no room`` is lean ``fit`` with ``call_with_room`` replaced by a plain call.
Every depth runs every side in turn, ``--repeats`` times; medians.

How to run
----------
::

    python benchmarks/stack_depth.py            # about two minutes on a 2-core CPU
    python benchmarks/stack_depth.py --quick    # a smoke run

The last line reads ``ratio (trainwell (lean), worst depth / median depth, steps/s): ..``:
1.0 is a loop whose speed does not depend on its caller's depth. Speed is measured here,
never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path

import overhead as bench
import torch

import trainwell.engine.fit as fit_module
from trainwell.data.digits import load_digits_splits
from trainwell.engine.loop.stack_room import WIDE, call_with_room

HAND, LEAN, NO_ROOM = "hand-written loop", "trainwell (lean)", "trainwell, no room"
SIDES = (HAND, LEAN, NO_ROOM)


def at_depth(depth: int, fn: Callable[[], float]) -> float:
    """``fn()`` called under ``depth`` more Python frames."""
    if depth == 0:
        return fn()
    return at_depth(depth - 1, fn)


def plain_call(fn, /, *args, **kwargs):
    return fn(*args, **kwargs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300, help="steps per run")
    parser.add_argument("--repeats", type=int, default=2, help="runs per side and depth")
    parser.add_argument("--max-depth", type=int, default=150)
    parser.add_argument("--every", type=int, default=6, help="depth step")
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.repeats, args.max_depth, args.every = 40, 1, 12, 6
    bench.MODEL = "mlp"
    torch.set_num_threads(1)
    train, _, _ = load_digits_splits()
    depths = range(0, args.max_depth + 1, args.every)
    rates: dict[tuple[str, int], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="trainwell-depth-") as tmp:
        run_dirs = (Path(tmp) / f"run-{i}" for i in range(10**9))

        def side(name: str) -> float:
            fit_module.call_with_room = plain_call if name == NO_ROOM else call_with_room
            if name == HAND:
                timing = bench.run_hand(train, args.steps, 64)
            else:
                timing = bench.run_trainwell(train, args.steps, 64, next(run_dirs), lean=True)
            return args.steps / timing.steps_time

        for name in SIDES:  # warm-up: imports, first calls
            side(name)
        for _ in range(args.repeats):
            for depth in depths:
                for name in SIDES:
                    rates.setdefault((name, depth), []).append(at_depth(depth, partial(side, name)))
    fit_module.call_with_room = call_with_room
    report(rates, depths, args)
    return 0


def report(rates: dict[tuple[str, int], list[float]], depths: range, args) -> None:
    median = statistics.median
    print(f"tiny MLP, {args.steps} steps per run, {args.repeats} run(s) per side and depth; "
          f"steps/s (medians); Python {sys.version.split()[0]}, stack room "
          f"{'on' if WIDE else 'a plain call here'}")  # fmt: skip
    print(f"{'depth':>5} " + " ".join(f"{name:>20}" for name in SIDES))
    per_side: dict[str, list[float]] = {name: [] for name in SIDES}
    for depth in depths:
        row = [median(rates[(name, depth)]) for name in SIDES]
        for name, value in zip(SIDES, row):
            per_side[name].append(value)
        print(f"{depth:5d} " + " ".join(f"{value:20.0f}" for value in row))
    hand = median(per_side[HAND])
    print()
    for name in SIDES:
        values = per_side[name]
        print(f"{name:20} worst {min(values):6.0f}  median {median(values):6.0f}  best "
              f"{max(values):6.0f}  worst/median {min(values) / median(values):.3f}  "
              f"median vs hand's {median(values) / hand:.3f}")  # fmt: skip
    print()
    for name in (NO_ROOM, LEAN):
        values = per_side[name]
        print(f"ratio ({name}, worst depth / median depth, steps/s): "
              f"{min(values) / median(values):.3f}")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
