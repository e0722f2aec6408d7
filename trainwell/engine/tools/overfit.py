"""Overfit one batch: can the model, loss and optimizer drive the loss of one batch to zero?

The first check of Karpathy's "recipe for training neural networks": a model with enough
capacity, trained on one fixed batch over and over, must memorize it. If it cannot, the
fault is in the model, the loss wiring or the optimizer (a frozen layer, a detached
output, a wrong loss for the targets, an lr far off), not in the data; if it can but full
training does not learn, look at the data (labels, shuffling, augmentation).

``trainwell train doctor.overfit_batch=true`` runs it in place of training (see
:mod:`trainwell.engine.tools.overfit_run`); this module holds the check itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from trainwell.engine.distributed.placement import Placement, all_reduce_sum
from trainwell.engine.loading.batch import to_device
from trainwell.engine.step.step_fn import unpack
from trainwell.engine.step.stepper import Stepper

# Steps when train.max_steps does not say: enough for a small model to memorize a batch
# with the default AdamW lr, short enough to be a quick check (seconds on a CPU).
DEFAULT_STEPS = 200
# Passed when the final loss is below 5% of the initial loss, or below 0.05 outright.
# The absolute bound covers a loss that starts small (a regression target already near
# its mean); the relative one covers losses with another scale than cross-entropy's.
PASS_RATIO = 0.05
PASS_LOSS = 0.05


@dataclass
class OverfitResult:
    """The outcome of :func:`overfit_one_batch`.

    Attributes:
        initial_loss: the loss of the batch before any update.
        final_loss: the loss of the batch after the last update.
        steps: optimizer steps taken.
        losses: the loss of every step, before its update (``losses[0] == initial_loss``).

    Example:
        >>> r = OverfitResult(initial_loss=2.3, final_loss=0.004, steps=200)
        >>> r.passed, round(r.ratio, 4)
        (True, 0.0017)
        >>> OverfitResult(initial_loss=2.3, final_loss=1.9, steps=200).passed
        False
    """

    initial_loss: float
    final_loss: float
    steps: int
    losses: list[float] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        """final / initial loss (``nan`` when the initial loss is zero or not finite)."""
        if not math.isfinite(self.initial_loss) or self.initial_loss == 0:
            return math.nan
        return self.final_loss / self.initial_loss

    @property
    def passed(self) -> bool:
        """The final loss is below ``PASS_RATIO`` of the initial one, or below ``PASS_LOSS``."""
        if not math.isfinite(self.final_loss):
            return False
        # NaN (a zero or non-finite initial loss) compares false: only the absolute bound.
        return self.final_loss < PASS_LOSS or self.ratio < PASS_RATIO

    def verdict(self) -> str:
        """One line: PASSED or FAILED, the losses, and what to look at next."""
        losses = f"loss {self.initial_loss:.4g} -> {self.final_loss:.4g} in {self.steps} steps"
        if self.passed:
            return (
                f"overfit check: PASSED — {losses}: the model and loss can learn; if full "
                "training does not, look at the data (labels, shuffling, augmentation)"
            )
        return (
            f"overfit check: FAILED — {losses}: the model/loss/optimizer cannot fit even one "
            "batch: check the loss wiring, learning rate, frozen parameters, the output layer"
        )

    def to_dict(self) -> dict[str, Any]:
        """What ``summary.json`` holds under ``"overfit"``."""
        ratio = self.ratio
        return {
            "passed": self.passed,
            "initial_loss": self.initial_loss,
            "final_loss": self.final_loss,
            "ratio": ratio if math.isfinite(ratio) else None,
            "steps": self.steps,
            "criterion": f"final loss < {PASS_RATIO:g} x initial loss, or < {PASS_LOSS:g}",
        }


def overfit_one_batch(
    stepper: Stepper,
    micro_batches: Sequence[Any],
    scheduler: Any,
    steps: int,
    place: Placement | None = None,
) -> OverfitResult:
    """Train on the same batch for ``steps`` optimizer steps; report the loss before and after.

    Each step is the engine's own (:class:`~trainwell.engine.step.stepper.Stepper`: the step
    function under autocast, accumulation over ``micro_batches``, scaler, clipping),
    followed by a scheduler step. The model stays in training mode throughout, so the
    final loss is measured the way the step losses are (dropout on, batch norm on batch
    statistics). The losses stay on the device and are read once at the end; on several
    processes they are averaged.

    Args:
        stepper: the run's optimizer step (model, step function, optimizer, precision).
        micro_batches: the one batch, as the accumulation micro-batches.
        scheduler: stepped after every optimizer step.
        steps: optimizer steps to take.
        place: the process's placement (default: one process).

    Example:
        >>> from trainwell.engine.step.precision import Precision
        >>> from trainwell.engine.step.step_fn import LossStep
        >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
        <torch._C.Generator object at ...>
        >>> from torch import nn
        >>> net = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 3))
        >>> batch = [(torch.randn(8, 4), torch.randint(0, 3, (8,)))]
        >>> opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
        >>> sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
        >>> p = Precision.build("fp32", torch.device("cpu"))
        >>> stepper = Stepper(net, LossStep(nn.CrossEntropyLoss()), opt, p, 1.0,
        ...                   torch.device("cpu"))
        >>> overfit_one_batch(stepper, batch, sched, 100).passed
        True
    """
    assert steps > 0 and micro_batches
    # On the device once, not at every step.
    micro_batches = [to_device(b, stepper.device) for b in micro_batches]
    losses = torch.empty(steps + 1, device=stepper.device)
    stepper.net.train()
    for i in range(steps):
        losses[i] = stepper(micro_batches)
        scheduler.step()
    # The loss after the last update: one more forward, no graph needed.
    with torch.no_grad(), stepper.precision.autocast():
        final = sum(
            unpack(stepper.step_fn(stepper.net, b), 1)[0].float() for b in micro_batches
        ) / len(micro_batches)
    losses[steps] = final
    # The one sync of the check.
    values = losses.tolist()
    if place is not None and place.distributed:
        values = [v / place.world_size for v in all_reduce_sum(values, place)]
    return OverfitResult(
        initial_loss=values[0], final_loss=values[-1], steps=steps, losses=values[:-1]
    )
