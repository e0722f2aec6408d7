"""Does the default warmup cost the default run anything? Accuracy and time, side by side.

The default config (digits, simple_cnn, AdamW, cosine) is trained with and without the
default warmup (``sched.warmup_ratio=0.05`` against ``sched.warmup_ratio=0``) for the same
seeds, interleaved (one seed with, then without) so that a change in the machine's load
reaches both sides alike. Printed: each side's mean and worst validation accuracy, its mean
wall time, and the ratios.

Run: ``python benchmarks/warmup.py [--seeds 3] [--epochs N]`` (``--epochs`` shortens the
default run's 20 epochs for a quick look; the figures quoted come from the full run).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import trainwell
from trainwell.engine.loop.progress import make_console


def one_run(folder: Path, seed: int, ratio: float, epochs: int | None) -> tuple[float, float]:
    overrides = [f"run.seed={seed}", f"sched.warmup_ratio={ratio}",
                 f"run.dir={folder / f'{ratio}-{seed}'}"]  # fmt: skip
    if epochs:
        overrides.append(f"train.epochs={epochs}")
    cfg = trainwell.load_config(overrides=overrides)
    began = time.perf_counter()
    result = trainwell.fit(cfg, console=make_console(quiet=True))
    return result.metrics["val/accuracy"], time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=None)
    args = parser.parse_args()
    sides: dict[float, list[tuple[float, float]]] = {0.05: [], 0.0: []}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds):
            for ratio in sides:
                sides[ratio].append(one_run(Path(tmp), seed, ratio, args.epochs))
    print(f"default run{'' if not args.epochs else f', {args.epochs} epochs'}, "
          f"{args.seeds} seeds, interleaved")  # fmt: skip
    for ratio, runs in sides.items():
        accs, times = [a for a, _ in runs], [t for _, t in runs]
        print(f"  warmup_ratio={ratio:<5} val/accuracy mean {statistics.mean(accs):.4f} "
              f"(worst {min(accs):.4f}), wall {statistics.mean(times):.1f}s")  # fmt: skip
    with_w, without = sides[0.05], sides[0.0]
    acc_ratio = statistics.mean(a for a, _ in with_w) / statistics.mean(a for a, _ in without)
    time_ratio = statistics.mean(t for _, t in with_w) / statistics.mean(t for _, t in without)
    print(f"  accuracy with/without warmup: {acc_ratio:.4f}; time with/without: {time_ratio:.3f}")


if __name__ == "__main__":
    main()
