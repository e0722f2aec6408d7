"""Does ``trainwell bench-data``'s recommendation feed a starved model, and is it the best?

What is measured
----------------
A data set with a deliberate cost per sample (``--cost sleep``: a wait of ``--delay-ms``
per sample, like reading a file or a network store, which workers overlap on any number of
cores; ``--cost cpu``: a CPU-bound transform of about that long, which only more cores
help) feeds a small MLP (64 -> 256 -> 10, AdamW, fp32) that steps far faster than the
data comes. Three parts, in one run:

1. **bench-data**: the very sweep ``trainwell bench-data`` runs (``trainwell.benchdata``
   over the engine's training loader of this data set), in ``--seconds``; its table and
   its recommendation.
2. **full sweep**: every combination of ``num_workers`` (0 .. the usable cores),
   ``persistent_workers``, ``prefetch_factor`` (2, 4) and, with CUDA, ``pin_memory``,
   each given the same time. The line ``recommended / best of a full sweep`` divides the
   full sweep's batches/s of the recommended setting by its fastest row's (aim: >= 0.95).
3. **training**: ``--steps`` optimizer steps of the engine's own step
   (``trainwell.engine.step.stepper.Stepper``) over the engine's training loader
   (``TrainData.build``), once with ``num_workers=0``, once with the recommended setting
   and once with the full sweep's fastest (when it differs), in interleaved rounds
   (median of ``--rounds``). Samples/s counts the steps after the first (worker start-up
   left out); the data wait is the share of that time spent blocked on the next batch.

The last line is ``ratio (recommended / num_workers=0, samples/s)``. Nothing is written
to disk. On a busy machine the figures move from run to run; the ratios are what counts.

Usage::

    python benchmarks/data.py            # about a minute
    python benchmarks/data.py --quick    # a smoke run, well under a minute
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import statistics
import time

import torch
from torch import nn
from torch.utils.data import Dataset

from trainwell.benchdata.measure import measure
from trainwell.benchdata.render import render
from trainwell.benchdata.settings import Setting, rate_text, recommend, worker_counts
from trainwell.benchdata.sources import EngineSource
from trainwell.benchdata.sweep import SweepResult, sweep
from trainwell.engine.distributed.placement import Placement
from trainwell.engine.loading.loaders import LoaderSettings, TrainData
from trainwell.engine.loop.progress import make_console
from trainwell.engine.step.precision import Precision
from trainwell.engine.step.step_fn import LossStep
from trainwell.engine.step.stepper import Stepper
from trainwell.env import usable_cores

FEATURES, CLASSES = 64, 10


class SlowDataset(Dataset):
    """Fixed random inputs labelled by a linear teacher; each sample costs ``delay`` s."""

    def __init__(self, size: int, delay: float, cost: str) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(size, FEATURES, generator=g)
        self.targets = (self.x @ torch.randn(FEATURES, CLASSES, generator=g)).argmax(1)
        self.delay, self.cost = delay, cost
        self.spins = _calibrate(delay) if cost == "cpu" else 0

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.x[i]
        if self.cost == "sleep":
            time.sleep(self.delay)
        else:  # a CPU-bound "augmentation" whose result is folded in, so it is not skipped
            acc = 0.0
            for k in range(self.spins):
                acc += (k * 2654435761) % 97
            x = x + acc * 0.0
        return x, self.targets[i]


def _calibrate(delay: float) -> int:
    """Loop iterations of the CPU cost that take about ``delay`` seconds here."""
    n, start = 20000, time.perf_counter()
    acc = 0
    for k in range(n):
        acc += (k * 2654435761) % 97
    per = (time.perf_counter() - start) / n
    return max(1, int(delay / per))


def full_sweep(source: EngineSource, cores: int, cuda: bool, slot: float) -> SweepResult:
    """Every combination of the knobs, each measured for ``slot`` seconds."""
    settings = [Setting(0, pin) for pin in ((False, True) if cuda else (False,))]
    for w, persistent, prefetch in itertools.product(
        worker_counts(cores)[1:], (False, True), (None, 4)
    ):
        for pin in (False, True) if cuda else (False,):
            settings.append(Setting(w, pin, persistent, prefetch))
    rows = []
    for setting in settings:
        with source.open(setting) as batches:
            rows.append(measure(setting, batches, slot))
    best = max(rows, key=lambda r: r.batches_per_s)
    return SweepResult(rows, recommend(rows), best, cuda=cuda)


@dataclasses.dataclass
class TrainRun:
    samples_per_s: float
    data_wait: float


def train(ds: Dataset, settings: LoaderSettings, setting: Setting, place: Placement,
          steps: int) -> TrainRun:  # fmt: skip
    """``steps`` optimizer steps of the engine's step over the engine's loader."""
    tuned = dataclasses.replace(
        settings,
        num_workers=setting.num_workers or 0,
        pin_memory=setting.pin_memory,
        persistent_workers=setting.persistent_workers,
        prefetch_factor=setting.prefetch_factor,
    )
    data = TrainData.build(ds, tuned, place)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(FEATURES, 256), nn.ReLU(), nn.Linear(256, CLASSES))
    net = net.to(place.device)
    stepper = Stepper(net, LossStep(nn.CrossEntropyLoss()), torch.optim.AdamW(net.parameters()),
                      Precision.build("fp32", place.device), 0.0, place.device)  # fmt: skip
    batches = (step for epoch in itertools.count() for step in data.epoch(epoch))
    stepper(next(batches))  # the first step: worker start-up, left out
    waited, start = 0.0, time.perf_counter()
    for _ in range(steps):
        t = time.perf_counter()
        step = next(batches)
        waited += time.perf_counter() - t
        loss = stepper(step)
    float(loss)
    elapsed = time.perf_counter() - start
    batches.close()
    loader = data.loader
    if getattr(loader, "_iterator", None) is not None:
        loader._iterator._shutdown_workers()
    return TrainRun(steps * settings.batch_size / elapsed, waited / elapsed)


def _median(runs: list[TrainRun]) -> TrainRun:
    return TrainRun(
        statistics.median(r.samples_per_s for r in runs),
        statistics.median(r.data_wait for r in runs),
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # One thread by default: on a small busy machine, two threads spin against each other
    # and the data loader's workers, and the tiny model would no longer outrun the data.
    torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cuda = device.type == "cuda"
    place = Placement(device)
    cores = usable_cores() or 1
    ds = SlowDataset(args.samples, args.delay_ms / 1000, args.cost)
    settings = LoaderSettings(batch_size=args.batch_size, seed=0)
    source = EngineSource(ds, settings, place)
    console = make_console()
    console.print(
        f"data: {args.samples} samples, {args.delay_ms:g} ms each ({args.cost}), batch "
        f"{args.batch_size}; model on {device}, {args.threads} thread(s); {cores} usable cores; "
        f"torch {torch.__version__}",
        highlight=False,
    )

    console.print(f"\n[bold]1. bench-data[/] ({args.seconds:g}s budget)")
    swept = sweep(source, args.seconds, cores=cores, cuda=cuda)
    render(swept, console)
    rec = swept.recommended.setting

    console.print(f"\n[bold]2. full sweep[/] ({args.slot:g}s per setting)")
    full = full_sweep(source, cores, cuda, args.slot)
    render(full, console)
    rec_row = next((r for r in full.rows if r.setting == rec), None)
    full_ratio = rec_row.batches_per_s / full.best.batches_per_s if rec_row else float("nan")

    console.print(f"\n[bold]3. training[/] ({args.steps} steps x {args.rounds} rounds)")
    candidates = {"num_workers=0": Setting(0), "recommended": rec}
    if full.best.setting != rec:
        candidates["full-sweep best"] = full.best.setting
    runs: dict[str, list[TrainRun]] = {name: [] for name in candidates}
    for r in range(args.rounds):
        names = list(candidates)
        names = names[r % len(names) :] + names[: r % len(names)]  # rotate the order
        for name in names:
            runs[name].append(train(ds, settings, candidates[name], place, args.steps))
    med = {name: _median(done) for name, done in runs.items()}
    for name, run in med.items():
        console.print(
            f"  {name:<16} {candidates[name].describe():<32} {rate_text(run.samples_per_s):>8} "
            f"samples/s   data wait {run.data_wait:4.0%}",
            highlight=False,
        )
    base, tuned = med["num_workers=0"], med["recommended"]
    console.print(f"  data wait: {base.data_wait:.0%} with num_workers=0 -> {tuned.data_wait:.0%} "
                  f"recommended", highlight=False)  # fmt: skip
    if "full-sweep best" in med:
        ratio = tuned.samples_per_s / med["full-sweep best"].samples_per_s
        print(f"ratio (recommended / full-sweep best, training samples/s): {ratio:.2f}")
    print(f"ratio (recommended / best of a full sweep, batches/s): {full_ratio:.2f}")
    print(f"ratio (recommended / num_workers=0, samples/s): "
          f"{tuned.samples_per_s / base.samples_per_s:.2f}")  # fmt: skip
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run, well under a minute")
    parser.add_argument("--cost", choices=("sleep", "cpu"), default="sleep")
    parser.add_argument("--delay-ms", type=float, default=1.0, help="cost per sample (ms)")
    parser.add_argument("--samples", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=20.0, help="bench-data's budget")
    parser.add_argument("--slot", type=float, default=2.0, help="full sweep: s per setting")
    parser.add_argument("--steps", type=int, default=150, help="training steps per run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--threads", type=int, default=1, help="torch intra-op threads of the main process"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.samples, args.seconds, args.slot = 1024, 4.0, 0.5
        args.steps, args.rounds = 30, 1
    return args


if __name__ == "__main__":
    raise SystemExit(main())
