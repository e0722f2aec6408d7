"""What the doctor costs a training loop: optimizer steps per second with
``trainwell.doctor.watch()`` on, over the same loop with it off.

What is measured
----------------
A hand-written training loop, as real scripts have it::

    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())

runs for a fixed number of optimizer steps, once plainly ("off") and once inside
``with trainwell.doctor.watch():`` ("on"), with the doctor's default probes. While it
watches, the doctor has global module forward hooks, a global optimizer step hook and a
wrapper around ``Tensor.backward`` installed, and its probes run at every root forward
(the model's and the loss module's), every backward and every optimizer step. Only the
loop is timed: building the model, entering and leaving ``watch()`` and the doctor's
end-of-run judgement fall outside the clock.

Three workloads, on the CPU, fp32, with a fixed number of intra-op threads
(``--threads``, default 1):

- **tiny**: ``nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))`` on random
  data, batch 32, pre-made batches, SGD with momentum. A step takes about a quarter of a
  millisecond, nearly all of it Python and dispatch overhead, so this shows the doctor's
  fixed cost per step at its worst.
- **cnn**: the default model, ``trainwell.models.simple_cnn(10, (1, 8, 8))``, on the
  digits training split (``trainwell.data.digits.load_digits_splits()[0]``), batch 64,
  a shuffling ``DataLoader`` (``num_workers=0``), Adam.
- **engine**: ``trainwell.fit`` with the built-in default (the same CNN on the digits,
  batch 64) and ``doctor.enabled=true`` over ``false``; ``train.precision=fp32``,
  ``run.device=cpu``, ``data.num_workers=0``, ``train.max_steps`` = the step count, run
  directories in a temporary folder removed afterwards. Its time is
  ``summary["train_time_s"]`` (the training steps of each epoch, not setup, evaluation,
  checkpoints or the plot) and its step count ``summary["steps"]``.

Each run starts from the same seed (weights, data order), so both sides train exactly
alike; the losses (for the engine, the final metrics) of the two sides are compared, and
a difference is reported (the doctor must watch, never change, the training). Runs
alternate off/on (the order swapped every repeat) after a warm-up run of each, so that
machine noise hits both sides alike. The table gives, per side, the median steps/s and
its min-max over the repeats; the ratio is that of the medians, and the doctor's cost per
step is the difference of the median step times. The findings column counts what the
doctor reported about these (correct) loops: it should be 0.

How to run
----------
::

    python benchmarks/doctor_overhead.py              # about two minutes on a 2-core CPU
    python benchmarks/doctor_overhead.py --quick      # a few seconds: a smoke run
    python benchmarks/doctor_overhead.py --steps 1000 --repeats 9 --threads 1

The last lines read ``ratio engine (doctor on / off, steps/s): 0.97``,
``ratio tiny (doctor on / off, steps/s): 0.93`` and
``ratio cnn (doctor on / off, steps/s): 0.98``. The aim: at least 0.90 for the tiny model
and 0.95 for the CNN, so that the doctor's default mode is cheap enough to leave on.
Speed is measured here, never asserted.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple

import torch
from rich.console import Console
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainwell
from trainwell.data.digits import load_digits_splits
from trainwell.models import simple_cnn

SEED = 0


class Setup(NamedTuple):
    """What one timed run trains: built afresh, from the same seed, for every run."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    loss_fn: nn.Module
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]]


class Run(NamedTuple):
    seconds: float  # the loop alone
    losses: list[float]  # to check that both sides train alike
    findings: int  # what the doctor reported (0 when off)


def tiny_setup(batches: list[tuple[torch.Tensor, torch.Tensor]]) -> Setup:
    torch.manual_seed(SEED)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return Setup(model, optimizer, nn.CrossEntropyLoss(), batches)


def tiny_batches(count: int = 16, batch_size: int = 32) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Random inputs with a learnable label (the sign of their sum)."""
    g = torch.Generator().manual_seed(SEED)
    x = torch.randn(count * batch_size, 8, generator=g)
    y = (x.sum(dim=1) > 0).long()
    return list(zip(x.split(batch_size), y.split(batch_size)))


def cnn_setup(train: TensorDataset) -> Setup:
    torch.manual_seed(SEED)
    model = simple_cnn(10, (1, 8, 8))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loader = DataLoader(
        train,
        batch_size=64,
        shuffle=True,
        drop_last=True,
        num_workers=0,
        generator=torch.Generator().manual_seed(SEED),
    )
    return Setup(model, optimizer, nn.CrossEntropyLoss(), loader)


def train(setup: Setup, steps: int) -> tuple[float, list[float]]:
    """The classic loop for ``steps`` optimizer steps; returns (seconds, losses)."""
    model, optimizer, loss_fn, batches = setup
    model.train()
    losses: list[float] = []
    step = 0
    start = time.perf_counter()
    while step < steps:
        for x, y in batches:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            step += 1
            if step == steps:
                break
    return time.perf_counter() - start, losses


def hand_written(make: Callable[[], Setup]) -> Callable[[int, bool], Run]:
    """A timed run of the hand-written loop, with the doctor watching or not."""

    def run(steps: int, doctor: bool) -> Run:
        setup = make()
        gc.collect()
        if not doctor:
            seconds, losses = train(setup, steps)
            return Run(seconds, losses, 0)
        with trainwell.doctor.watch() as doc:
            seconds, losses = train(setup, steps)
        return Run(seconds, losses, len(doc.findings))

    return run


def engine(tmp: Path, steps_per_epoch: int) -> Callable[[int, bool], Run]:
    """A timed ``trainwell.fit`` run with ``doctor.enabled`` true or false."""
    run_dirs = (tmp / f"run-{i}" for i in range(10**9))

    def run(steps: int, doctor: bool) -> Run:
        run_dir = next(run_dirs)
        cfg = trainwell.load_config(
            overrides=[
                f"run.dir={run_dir}",
                "run.device=cpu",
                "data.num_workers=0",
                "train.precision=fp32",
                f"train.epochs={math.ceil(steps / steps_per_epoch)}",
                f"train.max_steps={steps}",
                f"doctor.enabled={str(doctor).lower()}",
            ]
        )
        gc.collect()
        result = trainwell.fit(cfg, console=Console(quiet=True))
        summary = result.summary
        if summary.get("steps") != steps or not summary.get("train_time_s"):
            raise SystemExit(
                f"trainwell.fit ran {summary.get('steps')} steps in "
                f"{summary.get('train_time_s')} s; expected {steps} steps and a positive time"
            )
        report = run_dir / "doctor.json"
        findings = len(json.loads(report.read_text())["findings"]) if report.exists() else 0
        if doctor and not report.exists():
            print("warning: engine: doctor.enabled=true wrote no doctor.json", file=sys.stderr)
        return Run(float(summary["train_time_s"]), list(result.metrics.values()), findings)

    return run


def measure(run: Callable[[int, bool], Run], steps: int, repeats: int) -> dict[bool, list[Run]]:
    """Alternating off/on runs after a warm-up of each; {doctor_on: runs}."""
    for doctor in (False, True):  # first-call costs, allocator, caches: not counted
        run(min(steps, 50), doctor)
    runs: dict[bool, list[Run]] = {False: [], True: []}
    for r in range(repeats):
        for doctor in (False, True) if r % 2 == 0 else (True, False):
            runs[doctor].append(run(steps, doctor))
    return runs


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer; got {text}")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Optimizer steps/s of a hand-written loop with the doctor on, over off."
    )
    parser.add_argument("--steps", type=positive_int, default=300, help="steps per timed run")
    parser.add_argument("--repeats", type=positive_int, default=7, help="timed runs per side")
    # One thread by default: on a small CPU, intra-op threads compete with the Python
    # thread that drives the loop, which makes timings noisy; and one thread makes the
    # per-step Python work, where the doctor's cost lies, the largest share of a step.
    parser.add_argument("--threads", type=positive_int, default=1, help="torch intra-op threads")
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run of a few seconds (40 steps, 2 repeats)"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.repeats = 40, 2
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    digits_train = load_digits_splits()[0]
    batches = tiny_batches()
    with tempfile.TemporaryDirectory(prefix="trainwell-bench-") as tmp:
        workloads: dict[str, Callable[[int, bool], Run]] = {
            "tiny": hand_written(lambda: tiny_setup(batches)),
            "cnn": hand_written(lambda: cnn_setup(digits_train)),
            "engine": engine(Path(tmp), len(digits_train) // 64),
        }
        results = {name: measure(run, args.steps, args.repeats) for name, run in workloads.items()}
    if torch.get_num_threads() != args.threads:
        print(f"warning: torch now uses {torch.get_num_threads()} threads", file=sys.stderr)

    median = statistics.median
    n = args.steps
    print(
        f"trainwell {trainwell.__version__}, torch {torch.__version__}, {args.threads} "
        f"thread(s), CPU, fp32\n{n} steps x {args.repeats} repeats per side, alternating "
        "off/on, after a warm-up; medians"
    )
    print("tiny: Linear(8,16)-ReLU-Linear(16,2), random data, batch 32, pre-made batches, SGD")
    print(f"cnn:  simple_cnn(10, (1, 8, 8)), digits ({len(digits_train)} samples), batch 64, "
          "DataLoader, Adam")  # fmt: skip
    print("engine: trainwell.fit, built-in default (the same CNN and data), doctor.enabled "
          "true / false")  # fmt: skip
    print()
    print(
        f"{'':6} {'doctor':>6} {'steps/s':>9} {'min-max':>11} {'ms/step':>8} "
        f"{'findings':>8} {'on / off':>9} {'cost us/step':>13}"
    )
    ratios = {}
    for name, runs in results.items():
        rates = {on: [n / r.seconds for r in runs[on]] for on in (False, True)}
        off, on = median(rates[False]), median(rates[True])
        ratios[name] = on / off
        for doctor in (False, True):
            m = median(rates[doctor])
            spread = f"{min(rates[doctor]):.0f}-{max(rates[doctor]):.0f}"
            findings = max(r.findings for r in runs[doctor]) if doctor else "-"
            extra = f"{on / off:9.3f} {1e6 * (1 / on - 1 / off):13.1f}" if doctor else ""
            print(
                f"{name if not doctor else '':6} {'on' if doctor else 'off':>6} {m:9.1f} "
                f"{spread:>11} {1e3 / m:8.3f} {findings:>8} {extra}".rstrip()
            )
        reference = runs[False][0].losses
        if any(r.losses != reference for r in runs[False] + runs[True]):
            print(f"warning: {name}: the losses differ between runs (on vs off)", file=sys.stderr)
    print()
    print(
        "steps/s: the training loop alone (zero_grad, forward, loss, backward, step,\n"
        "  losses.append(loss.item())), not the model's construction nor entering and\n"
        "  leaving doctor.watch(); engine: summary steps / train_time_s.\n"
        "cost: median step time on minus off."
    )
    for name in ("engine", "tiny", "cnn"):  # the issue's two figures last
        print(f"ratio {name} (doctor on / off, steps/s): {ratios[name]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
