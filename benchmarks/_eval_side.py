"""The evaluation side of ``benchmarks/overhead.py``: what ``train.metrics`` objects cost.

One evaluation pass (loss and accuracy, in eval mode under ``inference_mode``) over the
same data, timed per batch, four ways:

- **hand-written eval loop**: loss and hits summed on the device, read once at the end;
- **trainwell Evaluator, no train.metrics**: the engine's evaluation as ``fit`` builds it
  (its loader from ``eval_loader``, the step built from the loss): the figure that must
  not move when no metric object is configured;
- **+ 1 metric object (plain macro-F1)**: the same with :class:`MacroF1` (a confusion
  matrix, :func:`torch.bincount` per batch) in ``train.metrics``;
- **+ torchmetrics MulticlassF1Score**: the same with torchmetrics' own, where installed.

Passes alternate between the sides (the order rotated each repeat) after one warm-up
pass each; the medians of the per-batch times are shown.
"""

from __future__ import annotations

import importlib.util
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn
from torch.utils.data import TensorDataset

from trainwell.engine.build.metric_objects import SplitMetrics
from trainwell.engine.distributed.placement import Placement
from trainwell.engine.loading.loaders import LoaderSettings, eval_loader
from trainwell.engine.loop.evaluate import Evaluator
from trainwell.engine.step.precision import Precision
from trainwell.engine.step.step_fn import LossStep

HAND = "hand-written eval loop"
NONE = "trainwell Evaluator, no train.metrics"
PLAIN = "+ 1 metric object (plain macro-F1)"
TORCHMETRICS = "+ torchmetrics MulticlassF1Score"
HAS_TORCHMETRICS = importlib.util.find_spec("torchmetrics") is not None
SIDES = (HAND, NONE, PLAIN) + ((TORCHMETRICS,) if HAS_TORCHMETRICS else ())


class MacroF1:
    """Macro-F1 over the split from a confusion matrix (the README's example class)."""

    def __init__(self, num_classes: int = 10) -> None:
        self.num_classes = num_classes
        self.reset()

    def reset(self) -> None:
        self.confusion = torch.zeros(self.num_classes, self.num_classes, dtype=torch.long)

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        index = target * self.num_classes + preds.argmax(1)
        counts = torch.bincount(index, minlength=self.num_classes**2)
        self.confusion += counts.view(self.num_classes, self.num_classes)

    def compute(self) -> float:
        c = self.confusion.double()
        return (2 * c.diag() / (c.sum(0) + c.sum(1)).clamp(min=1)).mean().item()


def _hand(model: nn.Module, loader) -> Callable[[], None]:
    loss_fn = nn.CrossEntropyLoss()

    @torch.inference_mode()
    def run() -> None:
        model.eval()
        total = torch.zeros((), dtype=torch.float64)
        hits = torch.zeros((), dtype=torch.long)
        n = 0
        for x, y in loader:
            out = model(x)
            total += loss_fn(out, y).double() * len(y)
            hits += (out.argmax(1) == y).sum()
            n += len(y)
        (total / n).item(), (hits / n).item()

    return run


def _evaluator(model: nn.Module, loader, side: str, classes: int) -> Callable[[], None]:
    place = Placement(torch.device("cpu"))
    objects = None
    if side == PLAIN:
        objects = SplitMetrics({"f1": MacroF1(classes)}, place)
    elif side == TORCHMETRICS:
        from torchmetrics.classification import MulticlassF1Score

        objects = SplitMetrics({"f1": MulticlassF1Score(classes, average="macro")}, place)
    ev = Evaluator(model, LossStep(nn.CrossEntropyLoss(), accuracy=True),
                   Precision.build("fp32", place.device), place, metrics=objects)  # fmt: skip
    return lambda: ev(loader)


def measure_eval(
    model: nn.Module, data: TensorDataset, batch_size: int, repeats: int, classes: int
) -> dict[str, list[float]]:
    """Seconds per evaluation batch of each side, ``repeats`` passes each."""
    settings = LoaderSettings(batch_size=batch_size, eval_batch_size=batch_size)
    loader = eval_loader(data, settings, Placement(torch.device("cpu")))
    batches = len(loader)
    runs = {HAND: _hand(model, loader)}
    runs.update({side: _evaluator(model, loader, side, classes) for side in SIDES[1:]})
    for side in SIDES:  # first calls, allocator: not counted
        runs[side]()
    per_batch: dict[str, list[float]] = {side: [] for side in SIDES}
    for r in range(repeats):
        k = r % len(SIDES)
        for side in SIDES[k:] + SIDES[:k]:
            t0 = time.perf_counter()
            runs[side]()
            per_batch[side].append((time.perf_counter() - t0) / batches)
    return per_batch


def print_eval(per_batch: dict[str, list[float]], samples: int, batch_size: int) -> None:
    median = statistics.median
    print()
    print(f"evaluation: {samples} samples in batches of {batch_size}, one pass per repeat")
    print(f"{'':40} {'ms/batch':>9} {'min-max':>13} {'vs hand':>8}")
    hand = median(per_batch[HAND])
    for side in SIDES:
        times = [1e3 * t for t in per_batch[side]]
        spread = f"{min(times):.3f}-{max(times):.3f}"
        print(f"{side:40} {median(times):9.3f} {spread:>13} {median(per_batch[side]) / hand:8.3f}")
    none = median(per_batch[NONE])
    print(f"ratio (trainwell eval, no train.metrics / hand-written eval, ms/batch): "
          f"{none / hand:.3f}")  # fmt: skip
    print(f"cost of 1 metric object (plain macro-F1), ms/batch: "
          f"{1e3 * (median(per_batch[PLAIN]) - none):+.3f}")  # fmt: skip
    if HAS_TORCHMETRICS:
        print(f"cost of torchmetrics MulticlassF1Score, ms/batch: "
              f"{1e3 * (median(per_batch[TORCHMETRICS]) - none):+.3f}")  # fmt: skip
    else:
        print("torchmetrics side skipped: torchmetrics is not installed")
