"""The ``loss-not-decreasing`` probe."""

from __future__ import annotations

import math
from typing import Any

import torch

from trainwell.doctor.events import BackwardEvent, LossEvent, Reporter, StepEvent
from trainwell.doctor.findings import Finding
from trainwell.doctor.sites import Site

# Findings that explain a loss that does not go down by themselves.
CAUSES = frozenset({
    "missing-zero-grad", "step-before-backward", "loss-no-gradient", "loss-broadcast",
    "softmax-before-loss", "label-out-of-range", "nonfinite-loss", "nonfinite-grad",
    "nonfinite-input", "amp-overflow", "param-not-in-optimizer", "unregistered-module",
})  # fmt: skip


class LossCurve:
    """The scalar losses of one backward call site, in order."""

    RESOLVE = 32

    def __init__(self) -> None:
        self.values: list[float] = []
        self.pending: list[torch.Tensor] = []

    def add(self, loss: torch.Tensor) -> None:
        if loss.numel() != 1:
            return
        loss = loss.detach().reshape(())
        if loss.device.type == "cpu":
            self.values.append(float(loss))
            return
        self.pending.append(loss)
        if len(self.pending) >= self.RESOLVE:
            self.resolve()

    def resolve(self) -> list[float]:
        if self.pending:
            self.values.extend(torch.stack(self.pending).float().cpu().tolist())
            self.pending = []
        return self.values


def not_decreasing(losses: list[float], min_steps: int = 100) -> bool:
    """Whether a loss curve shows no progress: the mean of its last tenth is not below
    the mean of its first tenth (at least 10 steps each).

    Example:
        >>> not_decreasing([0.69] * 150)
        True
        >>> not_decreasing([2.3 * 0.98 ** i for i in range(150)])
        False
    """
    finite = [v for v in losses if v == v and abs(v) != float("inf")]
    if len(finite) < min_steps:
        return False
    if min(finite) < 0:
        return False  # a surrogate objective (policy gradient), not a loss to minimize
    k = max(10, len(finite) // 10)
    first, last = sum(finite[:k]) / k, sum(finite[-k:]) / k
    if first < 1e-3:
        return False  # already at zero: nothing left to decrease
    return last >= first * 0.98


class LossNotDecreasingProbe:
    """``loss-not-decreasing``: the loss of the run's one training backward shows no
    progress after ``MIN_STEPS`` steps (judged once, at ``JUDGE_AT`` steps or at the
    end). Runs with several backward sites (GANs, several losses in turn) are left
    alone: their losses are not meant to fall together."""

    MIN_STEPS = 100
    JUDGE_AT = 1000

    def __init__(self) -> None:
        self.curves: dict[Any, LossCurve] = {}
        self.sites: dict[Any, Site] = {}
        self.backwards = 0
        self.judged = False
        self.optimizers: set[int] = set()
        self.chance: float | None = None  # ln C of the first classification loss seen

    def on_step(self, doc: Reporter, event: StepEvent) -> None:
        self.optimizers.add(id(event.optimizer))
        if doc.steps >= 100 and len(self.optimizers) == 1:
            doc.unsubscribe(self, "on_step")  # one optimizer: it stays one
        if len(self.optimizers) > 1:
            # Several optimizers (a GAN through one update() helper): their losses are
            # not meant to fall together.
            self.judged = True
            doc.unsubscribe(self, "on_backward", "on_step", "on_loss")

    def on_loss(self, doc: Reporter, event: LossEvent) -> None:
        x = event.input
        if event.name == "cross_entropy" and isinstance(x, torch.Tensor) and x.dim() >= 2:
            self.chance = math.log(max(2, x.shape[1]))
        doc.unsubscribe(self, "on_loss")

    def on_backward(self, doc: Reporter, event: BackwardEvent) -> None:
        value = event.value  # read once for every probe; a scalar on the CPU
        if value is None and event.tensor.numel() != 1:
            return
        key = event.key  # the site is looked up once per call site, not every step
        curve = self.curves.get(key)
        if curve is None:
            if not event.tensor.requires_grad:
                return
            site = event.site
            if site is None:
                return
            curve = self.curves[key] = LossCurve()
            self.sites[key] = site
        if value is not None:
            curve.values.append(value)
        else:
            curve.add(event.tensor)
        self.backwards += 1
        if self.backwards >= self.JUDGE_AT:
            self._judge(doc)

    def on_end(self, doc: Reporter) -> None:
        self._judge(doc)

    def _judge(self, doc: Reporter) -> None:
        if self.judged:
            return
        self.judged = True
        doc.unsubscribe(self, "on_backward")
        if len(self.curves) != 1 or any(f.code in CAUSES for f in doc.findings):
            return  # (a flat loss is the consequence of a cause already reported)
        ((key, curve),) = self.curves.items()
        losses = curve.resolve()  # counted in backwards: manual SGD has no optimizer steps
        if not not_decreasing(losses, self.MIN_STEPS):
            return
        k = max(10, len(losses) // 10)
        if self.chance is not None and sum(losses[:k]) / k < 0.75 * self.chance:
            return  # it started well below chance: a pretrained model fine-tuned
        site = self.sites[key]
        first, last = sum(losses[:k]) / k, sum(losses[-k:]) / k
        doc.add(
            Finding(
                code="loss-not-decreasing",
                severity="warning",
                file=site.file,
                line=site.line,
                message=f"the loss has not gone down in {len(losses)} steps (mean of the "
                f"first {k}: {first:.4g}, of the last {k}: {last:.4g})",
                why="nothing is being learned: a learning rate far too small (or too "
                "large), frozen weights, labels that do not match the inputs, or a loss "
                "that does not depend on the model",
                fix="run the overfit-one-batch check (trainwell doctor --overfit SCRIPT): if "
                "the model cannot drive one batch's loss to ~0, the bug is in the model, "
                "loss or optimizer; if it can, look at the data and labels; then try a "
                "learning-rate range test (trainwell lr-find)",
                evidence={"steps": len(losses), "first_mean": first, "last_mean": last},
            )
        )
