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
``with trainwell.doctor.watch():`` ("on"), with the doctor's default probes (every one).
While it watches, the doctor wraps ``nn.Module.__call__``, ``Tensor.backward``, the
losses and a few other torch calls, and has a global optimizer step hook; wrappers that
serve only probes that have stopped listening come off. Only the loop is timed:
building the model, entering and leaving ``watch()`` and the doctor's end-of-run
judgement fall outside the clock. The first ``FIRST`` steps of each run, where the
doctor's checks of the first steps run (once per run), are also timed on their own.

Three workloads, on the CPU, fp32, with a fixed number of intra-op threads
(``--threads``, default 1):

- **tiny**: ``nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))`` on random
  data, batch 32, pre-made batches, SGD with momentum, ``--tiny-steps`` (3000) steps per
  run. A step takes about a third of a millisecond, nearly all of it Python and
  dispatch overhead, so this shows the doctor's fixed cost per step at its worst. (At
  300 steps a run is 0.1 s and the one-time cost of the first steps, ~10-25 ms, would be
  most of what is measured.)
- **cnn**: the default model, ``trainwell.models.simple_cnn(10, (1, 8, 8))``, on the
  digits training split (``trainwell.data.digits.load_digits_splits()[0]``), batch 64,
  a shuffling ``DataLoader`` (``num_workers=0``), Adam, ``--steps`` (300) steps.
- **engine**: ``trainwell.fit`` with the built-in default (the same CNN on the digits,
  batch 64) and ``doctor.enabled=true`` over ``false``; ``train.precision=fp32``,
  ``run.device=cpu``, ``data.num_workers=0``, ``train.max_steps`` = ``--steps``, run
  directories in a temporary folder removed afterwards. Its time is
  ``summary["train_time_s"]`` (the training steps of each epoch, not setup, evaluation,
  checkpoints or the plot) and its step count ``summary["steps"]``.

Each run starts from the same seed (weights, data order), so both sides train exactly
alike; the losses (for the engine, the final metrics) of the two sides are compared, and
a difference is reported (the doctor must watch, never change, the training). Runs
alternate off/on (the order swapped every repeat) after a warm-up run of each, so that
machine noise hits both sides alike. The table gives, per side, the median steps/s and
its min-max over the repeats; the ratio is that of the medians, and the doctor's cost per
step is the difference of the median step times. Under it, for the hand-written loops:
what the first ``FIRST`` steps cost more in all, and the ratio of the steps after them.
The findings column counts what the doctor reported about these (correct) loops: it
should be 0.

How to run
----------
::

    python benchmarks/doctor_overhead.py              # about two minutes on a 2-core CPU
    python benchmarks/doctor_overhead.py --quick      # a few seconds: a smoke run
    python benchmarks/doctor_overhead.py --steps 1000 --tiny-steps 5000 --repeats 9

Measured on this project's 2-core CPU VM, quiet (2026-11-30, two runs of the default
command)::

    ratio engine (doctor on / off, steps/s): 0.96     0.94
    ratio tiny (doctor on / off, steps/s): 0.85       0.85
    ratio cnn (doctor on / off, steps/s): 0.96        0.98

with, under the table, tiny: first 100 steps +15.5 / +19.5 ms in all, after them 0.865
/ 0.864 (about 50 us per step of a 0.29 ms step); cnn: after them 0.963 / 0.988 (the
second run after data-bottleneck's windows became deques). A tiny-only harness (steps
100-3000 of 3000-step runs, 7 alternating repeats) measured 0.913 after the first steps.
The aim, not met for the tiny model: at least 0.90 for it and 0.97 for the CNN and the
engine, so that the doctor's default mode is cheap enough to leave on. Speed is measured
here, never asserted.

What stays per step
-------------------
After the first steps, what the doctor does at every step, and why each rule needs it
then (everything else has judged and stopped listening, or sleeps between looks):

The doctor itself, at each step:

- ``Module.__call__``: one Python call per module call (inside a model the call only
  passes through); the outermost call of a model (a module with weights) records the
  step's forward: the model, its inputs, the autocast state, the calling instruction.
  The NaN explanation replays the forward of the step whose loss went NaN, and the
  crash explainer names the state carried into it; either can come at any step.
- ``Tensor.backward``: the autograd sequence number of the loss (the mark of an earlier
  step's graph, for a crash's "backward through the graph a second time") and whether
  the loss is finite (a CPU scalar read once, ``.item()``; on an accelerator a flag kept
  on the device and read every 16 backwards): a NaN can come at any step, and the three
  non-finite probes hear of it only then (``on_nonfinite_loss``).
- the optimizer's post-step hook: counts the step (``--max-steps``, wake-ups).
- ``DataLoader.__next__`` (cnn): the wait for the batch, and the batch (for a NaN).

The probes still listening:

- ``eval-builds-graph``, at each training forward: counts the forwards of its calling
  line, and follows (a sentinel on the output's graph node) the first 16 of each line
  and 1 in 64 after: an evaluation without ``no_grad`` may come at any epoch.
- ``retain-graph``, at each backward: its ``retain_graph`` flag; the rule is "step
  after step" and a script may start retaining late.
- ``loss-not-decreasing``, at each of the first 1000 backwards: the loss value (already
  read), for a curve whose first and last tenths are compared.
- ``data-bottleneck`` (cnn), at each batch: the wait and the work between two batches,
  judged over windows of 24 batches; ``sampler-epoch-not-set``: the first batch of a
  pass.
- ``scheduler-not-stepped``: counts each optimizer's steps up to 50.

Asleep between looks (no call in between): ``graph-retained`` and
``tensor-accumulation`` (a scan of the user's variables at steps 1-9, the powers of two
and every 256th), ``param-without-grad`` (every 100 steps, only while a parameter has
had no gradient), ``allocator-fragmentation`` (CUDA only, every 10 steps). Heard only
when it happens: evaluations (``train-mode-in-eval``, ``eval-mode-in-train``), mode
switches, GradScaler updates (``amp-overflow``), a non-finite loss. Every other probe
judges the first steps (3 to 64 steps or loss calls) and stops listening.
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
FIRST = 100  # the first steps, timed on their own: the doctor's first-steps checks run there


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
    first: float | None = None  # of which the first FIRST steps (hand-written loops)


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


def train(setup: Setup, steps: int) -> tuple[float, float, list[float]]:
    """The classic loop for ``steps`` optimizer steps; returns (seconds, seconds of the
    first FIRST steps, losses)."""
    model, optimizer, loss_fn, batches = setup
    model.train()
    losses: list[float] = []
    step = 0
    start = first = time.perf_counter()
    while step < steps:
        for x, y in batches:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            step += 1
            if step == FIRST:
                first = time.perf_counter()
            if step == steps:
                break
    end = time.perf_counter()
    return end - start, (first if steps >= FIRST else end) - start, losses


def hand_written(make: Callable[[], Setup]) -> Callable[[int, bool], Run]:
    """A timed run of the hand-written loop, with the doctor watching or not."""

    def run(steps: int, doctor: bool) -> Run:
        setup = make()
        gc.collect()
        if not doctor:
            seconds, first, losses = train(setup, steps)
            return Run(seconds, losses, 0, first)
        with trainwell.doctor.watch() as doc:
            seconds, first, losses = train(setup, steps)
        return Run(seconds, losses, len(doc.findings), first)

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
    parser.add_argument(
        "--steps", type=positive_int, default=300, help="steps per timed run (cnn, engine)"
    )
    # At 0.3 ms a step, 300 steps are 0.1 s, and the doctor's checks of the first steps
    # (done once per run: ~10-15 ms) would be most of what is measured as a per-step
    # cost; a training run is thousands of steps.
    parser.add_argument(
        "--tiny-steps", type=positive_int, default=3000, help="steps per timed run (tiny)"
    )
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
        args.steps, args.tiny_steps, args.repeats = 40, 200, 2
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    digits_train = load_digits_splits()[0]
    batches = tiny_batches()
    steps = {"tiny": args.tiny_steps, "cnn": args.steps, "engine": args.steps}
    with tempfile.TemporaryDirectory(prefix="trainwell-bench-") as tmp:
        workloads: dict[str, Callable[[int, bool], Run]] = {
            "tiny": hand_written(lambda: tiny_setup(batches)),
            "cnn": hand_written(lambda: cnn_setup(digits_train)),
            "engine": engine(Path(tmp), len(digits_train) // 64),
        }
        results = {
            name: measure(run, steps[name], args.repeats) for name, run in workloads.items()
        }
    if torch.get_num_threads() != args.threads:
        print(f"warning: torch now uses {torch.get_num_threads()} threads", file=sys.stderr)
    print(
        f"trainwell {trainwell.__version__}, torch {torch.__version__}, {args.threads} "
        f"thread(s), CPU, fp32\nsteps per run: tiny {args.tiny_steps}, cnn and engine "
        f"{args.steps}; {args.repeats} repeats per side, alternating off/on, after a "
        "warm-up; medians"
    )
    print("tiny: Linear(8,16)-ReLU-Linear(16,2), random data, batch 32, pre-made batches, SGD")
    print(f"cnn:  simple_cnn(10, (1, 8, 8)), digits ({len(digits_train)} samples), batch 64, "
          "DataLoader, Adam")  # fmt: skip
    print("engine: trainwell.fit, built-in default (the same CNN and data), doctor.enabled "
          "true / false")  # fmt: skip
    print()
    ratios = report(results, steps)
    print()
    print(
        "steps/s: the training loop alone (zero_grad, forward, loss, backward, step,\n"
        "  losses.append(loss.item())), not the model's construction nor entering and\n"
        "  leaving doctor.watch(); engine: summary steps / train_time_s.\n"
        "cost: median step time on minus off.\n"
        f"first {FIRST} steps: what they cost more with the doctor on, in all (its checks of\n"
        "  the first steps, once per run); after them: the ratio of the steps after."
    )
    for name in ("engine", "tiny", "cnn"):  # the issue's two figures last
        print(f"ratio {name} (doctor on / off, steps/s): {ratios[name]:.2f}")
    return 0


def report(results: dict[str, dict[bool, list[Run]]], steps: dict[str, int]) -> dict[str, float]:
    """Print the table; return each workload's ratio (doctor on / off, steps/s)."""
    median = statistics.median
    print(
        f"{'':6} {'doctor':>6} {'steps/s':>9} {'min-max':>11} {'ms/step':>8} "
        f"{'findings':>8} {'on / off':>9} {'cost us/step':>13}"
    )
    ratios = {}
    for name, runs in results.items():
        n = steps[name]
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
        first = {on: [r.first for r in runs[on] if r.first is not None] for on in (False, True)}
        if n > FIRST and first[False] and first[True]:
            once = 1e3 * (median(first[True]) - median(first[False]))
            after = {on: [(n - FIRST) / (r.seconds - r.first) for r in runs[on]]  # type: ignore[operator]
                     for on in (False, True)}  # fmt: skip
            print(f"{'':6} first {FIRST} steps: {once:+.1f} ms in all; after them: on / off "
                  f"{median(after[True]) / median(after[False]):.3f}")  # fmt: skip
        reference = runs[False][0].losses
        if any(r.losses != reference for r in runs[False] + runs[True]):
            print(f"warning: {name}: the losses differ between runs (on vs off)", file=sys.stderr)
    return ratios


if __name__ == "__main__":
    sys.exit(main())
