"""The ``step-before-backward`` probe."""

from __future__ import annotations

from trainwell.doctor.events import (
    BackwardEvent,
    Reporter,
    ScalerStepEvent,
    StepEvent,
    ZeroGradEvent,
)
from trainwell.doctor.findings import Finding
from trainwell.doctor.gradients import GradientVerdicts
from trainwell.doctor.trackers import Trackers


class StepBeforeBackwardProbe:
    """``step-before-backward``: at each of an optimizer's first ``CHECK`` steps, does any
    parameter hold a non-zero gradient? When none holds one ``STREAK`` steps in a row,
    with no backward since the last step or a ``zero_grad`` after it, the calls are out
    of order. (A backward that ran and left exact zeros is ``loss-no-gradient``'s.)
    ``step(closure)`` and steps under a GradScaler are left alone.
    """

    CHECK = 12
    STREAK = 3

    def __init__(self) -> None:
        self.grads: GradientVerdicts  # over the run's FreshGradients, made in attach

    def attach(self, trackers: Trackers) -> None:
        self.grads = GradientVerdicts(trackers, self.CHECK)

    def on_backward(self, doc: Reporter, event: BackwardEvent) -> None:
        self.grads.backward(event)

    def on_zero_grad(self, doc: Reporter, event: ZeroGradEvent) -> None:
        self.grads.zero_grad(event.optimizer)

    def on_scaler_step(self, doc: Reporter, event: ScalerStepEvent) -> None:
        self.grads.scaler_step(event.optimizer)

    def on_pre_step(self, doc: Reporter, event: StepEvent) -> None:
        if not any(p.requires_grad for g in event.optimizer.param_groups for p in g["params"]):
            # Every parameter it holds is frozen: no order of calls gives them gradients
            # (a head built after the optimizer is param-not-in-optimizer's; a frozen
            # phase is by design), so this optimizer is not judged.
            self.grads.stop(event.optimizer)
        elif self.grads.run_of(event, "stale") >= self.STREAK:
            self._report(doc, event)
        self._stop_when_done(doc)

    def on_step(self, doc: Reporter, event: StepEvent) -> None:
        self.grads.stepped(event)
        self._stop_when_done(doc)

    def _stop_when_done(self, doc: Reporter) -> None:
        if self.grads.done():
            doc.unsubscribe(self, "on_backward", "on_zero_grad", "on_scaler_step",
                            "on_pre_step", "on_step")  # fmt: skip

    def _report(self, doc: Reporter, event: StepEvent) -> None:
        self.grads.stop(event.optimizer)
        site = event.site
        if site is None:
            return
        back = self.grads.backward_site() if self.grads.backward_site is not None else None
        related = [{"file": back.file, "line": back.line, "what": "backward"}] if back else []
        doc.add(
            Finding(
                code="step-before-backward",
                severity="error",
                file=site.file,
                line=site.line,
                message="optimizer.step() runs without fresh gradients: step is called "
                "before loss.backward(), or zero_grad() runs between backward and step",
                why="the step applies nothing (or the previous batch's gradients): the model "
                "trains late or not at all",
                fix="order each step as zero_grad(), forward, loss.backward(), optimizer.step()",
                related=related,
                evidence={"steps_observed": self.grads.steps(event.optimizer) + 1},
            )
        )
