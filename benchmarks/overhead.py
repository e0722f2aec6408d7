"""How many optimizer steps per second trainwell's loop runs, next to a hand-written loop
and to PyTorch Lightning's Trainer.

What is measured
----------------
Both sides train the same tiny model (``trainwell.models.simple_cnn`` on the 8x8
scikit-learn digits, training split, input ``(1, 8, 8)``, 10 classes) with the same data
(a ``TensorDataset``), batch size, optimizer (AdamW with trainwell's two parameter groups,
built by ``trainwell.engine.build.optim.build_optimizer`` from the default ``OptimConfig``), loss
(``nn.CrossEntropyLoss``), precision (fp32) and DataLoader settings (shuffled, incomplete
batches dropped, ``num_workers=0``), on the CPU, with the same number of intra-op threads.

- **hand-written**: the classic loop,
  ``for x, y in loader: opt.zero_grad(); loss = loss_fn(model(x), y); loss.backward();
  opt.step()``, over as many epochs as the step count needs.
- **trainwell (lean)**: ``trainwell.fit(cfg, model=..., train_data=..., loss_fn=...)`` with
  ``train.precision=fp32``, ``train.grad_clip=0``, ``sched.name=constant`` and
  ``train.log_every`` = the step count (one log point, at the end), no validation or test
  data: the loop machinery alone, the figure the project aims to keep >= 0.97 of the
  hand-written one.
- **hand-written + last.pt**: the same loop, writing ``{"model", "optimizer"}`` to
  ``last.pt`` between its epochs the careful way (a temporary file, fsync, rename), out
  of its timing, as a script that can resume does and as trainwell does at each epoch's
  end: the hand-written loop doing the same work. On a small VM the steps right after
  any such write run slower for a while (``benchmarks/epoch_end.py``), and on the digits
  an epoch is 19 steps, so both ratios are printed.
- **trainwell (defaults)**: the same, but with trainwell's defaults for gradient clipping
  (global norm 1.0), the schedule (cosine) and logging (every 10 steps), to show what
  those features cost.
- **hand-written + 2 metrics** and **trainwell (user step, 2 metrics)**: the same work
  with two more numbers per step (accuracy and mean top probability): the hand-written
  loop sums them on the device and reads them at the end; trainwell runs a step function
  ``step(model, batch) -> {"loss", "acc", "conf"}`` (lean settings), whose metrics the
  engine sums on the device and reads at its log points. Their ratio is the cost of the
  step-function contract itself.
- **trainwell (defaults + TB + MLflow)**: the defaults with ``log.tensorboard=true`` and
  ``log.mlflow=true`` (a SQLite store in the temporary folder): what the two loggers cost
  at log_every 10 (the project's aim: under 2% of steps/s). Runs where both extras are
  installed.
- **trainwell (lean, train.metrics set)**: lean with a metric object configured: objects
  are fed in evaluation only. The evaluation table (``benchmarks/_eval_side.py``) says
  what one costs there, per batch, against no object and a hand-written eval loop.
- **Lightning**: PyTorch Lightning's ``Trainer`` set to do lean trainwell's work
  (``benchmarks/_lightning_side.py``). An optional dependency (``pip install -e
  '.[bench]'``): without it, one line says the side is skipped.

The doctor is off on every trainwell side (``doctor.enabled=false``;
``benchmarks/doctor_overhead.py`` measures it). ``--model mlp`` trains a tiny MLP (one
hidden layer of 64) instead of the CNN: the smallest step, where the loop's own Python
weighs most.

Only the training steps are timed: for trainwell ``summary["train_time_s"]`` (per epoch,
from just after the epoch's data iterator is made to its last step; log points included;
setup, evaluation, the end-of-epoch ``last.pt`` and the plot outside), for the
hand-written loop and Lightning the same span. The whole ``fit()`` call's steps/s is
shown for information. The typical step is the median time between two forward passes
(the same forward pre-hook on every side): the steady state, free of epoch boundaries
and of most machine noise.

Runs alternate (every side in turn, the order rotated each repeat) after one warm-up run
of each, so that machine noise hits every side alike; the table gives the median of each
and the ratio of the medians. Run directories go to a temporary folder, removed after.

How to run
----------
::

    python benchmarks/overhead.py                 # about three minutes on a 2-core CPU
    python benchmarks/overhead.py --quick         # a few seconds: a smoke run
    python benchmarks/overhead.py --steps 1000 --repeats 7 --batch-size 64 --threads 1

The last lines read ``ratio (trainwell user step / hand-written + 2 metrics, steps/s): ..``,
``ratio (trainwell / Lightning, steps/s): ..`` (or the line saying that side is skipped),
``ratio (trainwell / hand-written + last.pt, steps/s): ..`` and
``ratio (trainwell / hand-written, steps/s): 0.98`` (lean trainwell over each).
Speed is measured here, never asserted.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import io
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import torch
from _eval_side import measure_eval, print_eval
from _lightning_side import MISSING as LIGHTNING_MISSING
from _lightning_side import train_lightning
from rich.console import Console
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainwell
from trainwell.data.digits import load_digits_splits
from trainwell.engine.build.optim import OptimConfig, build_optimizer
from trainwell.models import mlp, simple_cnn

SEED = 0
INPUT_SHAPE = (1, 8, 8)
NUM_CLASSES = 10

HAND = "hand-written loop"
HAND_CKPT = "hand-written + last.pt"
LEAN = "trainwell (lean)"
DEFAULTS = "trainwell (defaults)"
HAND_METRICS = "hand-written + 2 metrics"
STEP = "trainwell (user step, 2 metrics)"
LOGGERS = "trainwell (defaults + TB + MLflow)"
METRICS = "trainwell (lean, train.metrics set)"
LIGHTNING = "Lightning Trainer"
# TensorBoard and MLflow are optional extras: their side runs where both are installed.
WITH_LOGGERS = all(importlib.util.find_spec(m) for m in ("tensorboard", "mlflow"))
VARIANTS = (HAND, HAND_CKPT, LEAN, DEFAULTS, HAND_METRICS, STEP, METRICS)
VARIANTS += (LOGGERS,) if WITH_LOGGERS else ()
VARIANTS += () if LIGHTNING_MISSING else (LIGHTNING,)
MODEL = "cnn"  # set from --model


class Timing(NamedTuple):
    """One run, in seconds."""

    steps_time: float  # the training steps (trainwell: summary["train_time_s"])
    wall: float  # the whole run: building the model, the loader, fit() and all it does
    typical_step: float  # median time between two forward passes: steady state, no outliers


def make_model(stamps: list[float]) -> nn.Module:
    """The same architecture and initial weights on every side.

    A forward pre-hook (the same on every side, about a microsecond) notes when each
    forward pass starts, for the typical step time.
    """
    torch.manual_seed(SEED)
    if MODEL == "mlp":
        model = mlp(NUM_CLASSES, INPUT_SHAPE, hidden=(64,), dropout=0.0)
    else:
        model = simple_cnn(NUM_CLASSES, INPUT_SHAPE)

    def note_start(module: nn.Module, inputs: object) -> None:
        stamps.append(time.perf_counter())

    model.register_forward_pre_hook(note_start)
    return model


def typical_step(stamps: list[float]) -> float:
    return statistics.median(b - a for a, b in zip(stamps, stamps[1:]))


def extra_metrics(out: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Two numbers a user logs beside the loss: accuracy and mean top probability."""
    acc = (out.detach().argmax(1) == y).float().mean()
    conf = out.detach().softmax(1).amax(1).mean()
    return acc, conf


def user_step(model: nn.Module, batch: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    x, y = batch
    out = model(x)
    acc, conf = extra_metrics(out, y)
    return {"loss": nn.functional.cross_entropy(out, y), "acc": acc, "conf": conf}


def make_loader(train: TensorDataset, batch_size: int) -> DataLoader:
    """The hand-written and Lightning sides' loader (trainwell's has the same settings)."""
    return DataLoader(
        train,
        batch_size=batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=0,
        generator=torch.Generator().manual_seed(SEED),
    )


def run_hand(
    train: TensorDataset, steps: int, batch_size: int, metrics: bool = False,
    between: Callable[[nn.Module, torch.optim.Optimizer], None] | None = None,
) -> Timing:
    """The classic loop for ``steps`` optimizer steps (with ``metrics``: two more numbers
    per step, summed on the device and read once at the end; ``between(model, optimizer)``
    after each epoch, out of the timing: ``benchmarks/epoch_end.py``'s sides)."""
    wall0 = time.perf_counter()
    stamps: list[float] = []
    model = make_model(stamps)
    optimizer = build_optimizer(OptimConfig(), model)  # AdamW, same param groups as trainwell
    loss_fn = nn.CrossEntropyLoss()
    loader = make_loader(train, batch_size)
    model.train()
    done, steps_time = 0, 0.0
    sums = torch.zeros(3)
    while done < steps:
        batches = iter(loader)
        t0 = time.perf_counter()  # timed like trainwell's train_time: after iter(), per epoch
        for x, y in batches:
            optimizer.zero_grad()
            out = model(x)
            loss = loss_fn(out, y)
            loss.backward()
            optimizer.step()
            if metrics:
                acc, conf = extra_metrics(out, y)
                sums += torch.stack([loss.detach(), acc, conf]) * len(y)
            done += 1
            if done == steps:
                break
        steps_time += time.perf_counter() - t0
        if between is not None:
            between(model, optimizer)
    sums.tolist()  # the one read of the sums, as trainwell's log point
    return Timing(steps_time, time.perf_counter() - wall0, typical_step(stamps))


def save_last(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """A resumable script's checkpoint: written to a temporary file, synced, renamed."""
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def run_lightning(train: TensorDataset, steps: int, batch_size: int, root: Path) -> Timing:
    """Lightning's Trainer for ``steps`` steps (``benchmarks/_lightning_side.py``)."""
    wall0 = time.perf_counter()
    stamps: list[float] = []
    model = make_model(stamps)
    steps_time = train_lightning(model, make_loader(train, batch_size), steps, root)
    return Timing(steps_time, time.perf_counter() - wall0, typical_step(stamps))


def trainwell_config(
    run_dir: Path, steps: int, batch_size: int, steps_per_epoch: int, lean: bool, logs: bool,
    objects: bool = False,
) -> trainwell.Config:
    overrides = [
        f"run.dir={run_dir}",
        f"run.seed={SEED}",
        "run.device=cpu",
        f"data.batch_size={batch_size}",
        "data.num_workers=0",
        "train.precision=fp32",
        f"train.epochs={math.ceil(steps / steps_per_epoch)}",
        f"train.max_steps={steps}",
        "early_stop.patience=0",
        "checkpoint.every_steps=0",
        "doctor.enabled=false",
    ]
    if lean:
        overrides += ["train.grad_clip=0", "sched.name=constant", f"train.log_every={steps}"]
    if logs:  # one SQLite store for every run, as beside a project's runs/
        db = run_dir.parent / "mlflow.db"
        overrides += ["log.tensorboard=true", "log.mlflow=true", f"log.mlflow_uri=sqlite:///{db}"]
    if objects:
        overrides.append("train.metrics.f1={name: '_eval_side:MacroF1', kwargs: {num_classes: 10}}")
    return trainwell.load_config(overrides=overrides)


def run_trainwell(
    train: TensorDataset,
    steps: int,
    batch_size: int,
    run_dir: Path,
    lean: bool,
    step=None,
    logs: bool = False,
    objects: bool = False,
) -> Timing:
    """``trainwell.fit`` for ``steps`` steps (with the loss, or the user ``step``)."""
    cfg = trainwell_config(run_dir, steps, batch_size, len(train) // batch_size, lean, logs,
                           objects)  # fmt: skip
    wall0 = time.perf_counter()
    stamps: list[float] = []
    model = make_model(stamps)
    result = trainwell.fit(
        cfg,
        model=model,
        train_data=train,
        loss_fn=None if step else nn.CrossEntropyLoss(),
        step_fn=step,
        console=Console(file=io.StringIO()),  # quiet, and no progress bar
    )
    wall = time.perf_counter() - wall0
    summary = result.summary
    if summary.get("steps") != steps or not summary.get("train_time_s"):
        raise SystemExit(
            f"trainwell.fit ran {summary.get('steps')} steps in {summary.get('train_time_s')} s; "
            f"expected {steps} steps and a positive train_time_s"
        )
    # stamps[0] is fit's preflight forward pass; the median shrugs it off.
    return Timing(float(summary["train_time_s"]), wall, typical_step(stamps))


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer; got {text}")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Optimizer steps/s of trainwell.fit next to a hand-written loop and "
        "Lightning's Trainer."
    )
    parser.add_argument("--steps", type=positive_int, default=400, help="steps per run")
    parser.add_argument("--repeats", type=positive_int, default=5, help="timed runs per side")
    parser.add_argument("--batch-size", type=positive_int, default=64)
    parser.add_argument("--model", choices=["cnn", "mlp"], default="cnn", help="model to train")
    # Default 1 thread. On a 2-core machine, intra-op threads compete with the Python
    # thread that drives the loop and with any other process, which makes timings noisy,
    # while these tiny kernels (a batch of 64 8x8 images) barely gain from a second thread
    # (measured: about 185 vs 198 steps/s). One thread also makes the per-step Python work,
    # the very thing compared here, the largest share of a step: a conservative ratio.
    parser.add_argument("--threads", type=positive_int, default=1, help="torch intra-op threads")
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run of a few seconds (40 steps, 1 repeat)"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.repeats = 40, 1
    return args


def measure(args: argparse.Namespace, train: TensorDataset) -> dict[str, list[Timing]]:
    """Every side, a warm-up run each, then ``args.repeats`` rounds in rotated order."""
    steps_per_epoch = len(train) // args.batch_size
    timings: dict[str, list[Timing]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="trainwell-bench-") as tmp:
        run_dirs = (Path(tmp) / f"run-{i}" for i in range(10**9))

        def run(variant: str, steps: int) -> Timing:
            gc.collect()
            if variant in (HAND, HAND_METRICS):
                return run_hand(train, steps, args.batch_size, variant == HAND_METRICS)
            if variant == HAND_CKPT:
                last = Path(tmp) / "hand-last.pt"
                return run_hand(train, steps, args.batch_size,
                                between=lambda m, o: save_last(last, m, o))  # fmt: skip
            if variant == LIGHTNING:
                return run_lightning(train, steps, args.batch_size, next(run_dirs))
            step = user_step if variant == STEP else None
            lean = variant not in (DEFAULTS, LOGGERS)
            return run_trainwell(train, steps, args.batch_size, next(run_dirs), lean, step,
                                 variant == LOGGERS, variant == METRICS)  # fmt: skip

        warmup_steps = min(args.steps, 2 * steps_per_epoch)
        for variant in VARIANTS:  # imports, allocator, first-call costs: not counted
            run(variant, warmup_steps)
        for r in range(args.repeats):
            # Rotated order, so that no side always runs right after another one.
            k = r % len(VARIANTS)
            for variant in VARIANTS[k:] + VARIANTS[:k]:
                timings[variant].append(run(variant, args.steps))
    return timings


def print_table(args: argparse.Namespace, train: TensorDataset, timings: dict) -> None:
    median = statistics.median
    n = args.steps
    print(
        f"trainwell {trainwell.__version__}, torch {torch.__version__}, "
        f"{args.threads} thread(s), CPU, fp32; {MODEL} on the digits ({len(train)} "
        f"samples, {len(train) // args.batch_size} steps/epoch), batch {args.batch_size}, "
        f"AdamW; {n} steps x {args.repeats} repeats after a warm-up; medians"
    )
    print()
    print(
        f"{'':36} {'steps/s':>8} {'ms/step':>8} {'min-max':>9} {'vs hand':>8} "
        f"{'typical step ms':>16}"
    )
    hand = median(n / t.steps_time for t in timings[HAND])
    rows = [(v, [n / t.steps_time for t in timings[v]], timings[v]) for v in VARIANTS]
    rows.append(("trainwell (lean), whole fit() call", [n / t.wall for t in timings[LEAN]], []))
    if WITH_LOGGERS:
        for label, v in (("trainwell (defaults), whole fit()", DEFAULTS),
                         ("+ TB + MLflow, whole fit()", LOGGERS)):  # fmt: skip
            rows.append((label, [n / t.wall for t in timings[v]], []))
    for label, rates, runs in rows:
        m = median(rates)
        spread = f"{min(rates):.0f}-{max(rates):.0f}"
        typical = f"{1e3 * median(t.typical_step for t in runs):.3f}" if runs else "-"
        print(f"{label:36} {m:8.1f} {1e3 / m:8.3f} {spread:>9} {m / hand:8.3f} {typical:>16}")
    print(
        """
steps/s: trainwell's from summary["train_time_s"], the training steps of each epoch
  (the first steps after the end-of-epoch work included: they run on cold caches), not
  setup, the end-of-epoch last.pt checkpoint and metrics flush (which the hand-written
  loop does not do) or the curves plot; the hand-written loop timed alike, Lightning
  from on_train_epoch_start to the epoch's last on_train_batch_end. The last rows
  divide by the whole fit() call instead.
typical step: median time between two forward passes, the steady state without
  epoch-boundary effects.
lean: train.grad_clip=0, sched.name=constant, train.log_every=<steps>;
defaults: grad_clip 1.0, cosine schedule, log_every 10 (both fp32, no validation data);
+ TB + MLflow: defaults with log.tensorboard=true and log.mlflow=true (a SQLite store);
Lightning: its Trainer doing lean's work (see benchmarks/_lightning_side.py)."""
    )


def print_ratios(args: argparse.Namespace, timings: dict[str, list[Timing]]) -> None:
    def rate(variant: str) -> float:
        return statistics.median(args.steps / t.steps_time for t in timings[variant])

    hand, defaults, lean = rate(HAND), rate(DEFAULTS), rate(LEAN)
    print(f"ratio (trainwell defaults / hand-written, steps/s): {defaults / hand:.3f}")
    print(f"ratio (trainwell lean, train.metrics set / lean, steps/s): {rate(METRICS) / lean:.3f}")
    print(
        "ratio (trainwell user step / hand-written + 2 metrics, steps/s): "
        f"{rate(STEP) / rate(HAND_METRICS):.3f}"
    )
    if WITH_LOGGERS:
        print(
            "ratio (trainwell defaults + TB + MLflow / defaults, steps/s): "
            f"{rate(LOGGERS) / defaults:.3f}"
        )
    if LIGHTNING_MISSING:
        print(f"Lightning side skipped: {LIGHTNING_MISSING}")
    else:
        print(f"ratio (trainwell / Lightning, steps/s): {lean / rate(LIGHTNING):.3f}")
    print(f"ratio (trainwell / hand-written + last.pt, steps/s): {lean / rate(HAND_CKPT):.3f}")
    print(f"ratio (trainwell / hand-written, steps/s): {lean / hand:.3f}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    global MODEL
    MODEL = args.model
    torch.set_num_threads(args.threads)
    train, _, _ = load_digits_splits()
    if args.batch_size > len(train):
        raise SystemExit(f"--batch-size {args.batch_size} exceeds the {len(train)} samples")
    timings = measure(args, train)
    if torch.get_num_threads() != args.threads:
        print(f"warning: torch now uses {torch.get_num_threads()} threads", file=sys.stderr)
    print_table(args, train, timings)
    evals = measure_eval(make_model([]), train, args.batch_size, max(5, 4 * args.repeats),
                         NUM_CLASSES)  # fmt: skip
    print_eval(evals, len(train), args.batch_size)
    print_ratios(args, timings)
    return 0

if __name__ == "__main__":
    sys.exit(main())
