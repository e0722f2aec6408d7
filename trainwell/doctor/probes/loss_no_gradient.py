"""The ``loss-no-gradient`` probe."""

from __future__ import annotations

import weakref
from typing import Any

from trainwell.doctor.events import (
    BackwardEvent,
    LossEvent,
    Reporter,
    ScalerStepEvent,
    StepEvent,
    ZeroGradEvent,
)
from trainwell.doctor.findings import Finding
from trainwell.doctor.gradients import GradientVerdicts
from trainwell.doctor.graph import walk
from trainwell.doctor.nonfinite import loss_assignment
from trainwell.doctor.trackers import Trackers

# Operations whose gradient is zero wherever it is defined: a loss computed through one
# gives the weights nothing.
_FLAT = {"RoundBackward0": "torch.round", "SignBackward0": "torch.sign",
         "FloorBackward0": "torch.floor", "CeilBackward0": "torch.ceil",
         "TruncBackward0": "torch.trunc"}  # fmt: skip


class LossNoGradientProbe:
    """``loss-no-gradient``: at each of an optimizer's first ``CHECK`` steps, after a
    backward that nothing cleared since, is every gradient exactly zero? ``STREAK``
    steps in a row and the loss gives the weights nothing: ``cross_entropy`` over a
    one-output head (whose softmax is always 1), a loss made through ``round``, a loss
    that does not depend on the weights. ``step(closure)`` and steps under a GradScaler
    are left alone.
    """

    CHECK = 12
    STREAK = 3

    def __init__(self) -> None:
        self.grads: GradientVerdicts  # over the run's FreshGradients, made in attach
        self.values: list[float | None] = []  # the losses of the last backwards
        self.reason: tuple[Any, str] | None = None  # (site, why) of a loss with no gradient
        self.loss: Any = None  # the last tensor backwarded, weakly

    def attach(self, trackers: Trackers) -> None:
        self.grads = GradientVerdicts(trackers, self.CHECK)

    def on_loss(self, doc: Reporter, event: LossEvent) -> None:
        x = event.input
        if event.name in ("cross_entropy", "nll_loss") and x.dim() >= 2 and x.shape[1] == 1:
            fn = "cross_entropy" if event.name == "cross_entropy" else "log_softmax + nll_loss"
            self.reason = (event.pin(), f"{fn} over a single output (shape "
                           f"{tuple(x.shape)}): the softmax of one logit is always 1, so the "
                           "loss is 0 whatever the model outputs")  # fmt: skip

    def on_backward(self, doc: Reporter, event: BackwardEvent) -> None:
        self.grads.backward(event)
        self.loss = weakref.ref(event.tensor)
        self.values = [*self.values[-(self.STREAK - 1):], event.value]

    def on_zero_grad(self, doc: Reporter, event: ZeroGradEvent) -> None:
        self.grads.zero_grad(event.optimizer)

    def on_scaler_step(self, doc: Reporter, event: ScalerStepEvent) -> None:
        self.grads.scaler_step(event.optimizer)

    def on_pre_step(self, doc: Reporter, event: StepEvent) -> None:
        if self.grads.run_of(event, "zero") >= self.STREAK:
            self._report(doc, event)
        self._stop_when_done(doc)

    def on_step(self, doc: Reporter, event: StepEvent) -> None:
        self.grads.stepped(event)
        self._stop_when_done(doc)

    def _stop_when_done(self, doc: Reporter) -> None:
        if self.grads.done():
            doc.unsubscribe(self, "on_loss", "on_backward", "on_zero_grad", "on_scaler_step",
                            "on_pre_step", "on_step")  # fmt: skip

    def _why(self, values: list[float], constant: bool) -> tuple[str, str]:
        loss = self.loss() if self.loss is not None else None
        root = loss.grad_fn if loss is not None else None
        names = [type(n).__name__ for n in walk(root, 2000)] if root is not None else []
        flat = sorted({_FLAT[n] for n in names if n in _FLAT})
        if flat:
            return (f"it is computed through {', '.join(flat)}, whose gradient is zero "
                    "everywhere",
                    "compute the loss on the continuous output (logits or probabilities); "
                    "round only the predictions you report")  # fmt: skip
        fix = "compute the loss from the model's output, through operations with a gradient"
        if constant and values:
            return (f"it is the same number ({values[0]:g}) at every step: it does not depend "
                    "on the weights", fix)  # fmt: skip
        return "it does not change with the weights the optimizer holds", fix

    def _report(self, doc: Reporter, event: StepEvent) -> None:
        self.grads.stop(event.optimizer)
        values = [v for v in self.values if v is not None]
        constant = len(values) == len(self.values) and len(set(values)) == 1
        back = self.grads.backward_site() if self.grads.backward_site is not None else None
        if self.reason is not None:
            site, why = self.reason[0](), self.reason[1]
            fix = ("for one output per example use binary_cross_entropy_with_logits (or "
                   "BCEWithLogitsLoss) on float targets; for C classes give the head C "
                   "outputs")  # fmt: skip
        else:
            at = back if back is not None else event.site
            site = (loss_assignment(at) or at) if at is not None else None
            why, fix = self._why(values, constant)
        if site is None:
            return
        doc.add(
            Finding(
                code="loss-no-gradient",
                severity="error",
                file=site.file,
                line=site.line,
                message=f"the loss gives no gradient: {why}",
                why="after each backward every parameter's gradient is exactly zero, so "
                "optimizer.step() changes nothing (the order of the calls is right)",
                fix=fix,
                related=[{"file": back.file, "line": back.line, "what": "backward"}]
                if back
                else [],
                evidence={"steps_observed": self.grads.steps(event.optimizer) + 1,
                          "loss": values[-1] if values else None},  # fmt: skip
            )
        )
