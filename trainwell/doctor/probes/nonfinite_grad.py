"""The ``nonfinite-grad`` probe."""

from __future__ import annotations

from typing import Any

from trainwell.doctor.events import BackwardEvent, Reporter, ScalerStepEvent, StepEvent
from trainwell.doctor.findings import Finding
from trainwell.doctor.nonfinite import all_finite, finite_norms
from trainwell.doctor.nonfinite_cause import NONFINITE_CODES, first_cause
from trainwell.doctor.singular import singular_site
from trainwell.doctor.source import param_path


class NonFiniteGradProbe:
    """``nonfinite-grad``: gradients NaN/Inf outside mixed precision's own skipping.

    At each of the first ``GRAD_ALWAYS`` optimizer steps the gradients are checked (one
    fused norm); later a non-finite gradient shows as NaN weights, then a NaN loss, and
    is reported then, when the loss's first cause is weights an update made NaN.
    """

    GRAD_ALWAYS = 16  # gradients checked at each of the first steps

    def __init__(self) -> None:
        self.backwards = 0
        self.backward_site: Any = None  # event.pin() of the last backward of the first steps
        self.loss: Any = None  # its loss (the graph is freed by then; the scalar stays)
        self.in_scaler = False

    def on_backward(self, doc: Reporter, event: BackwardEvent) -> None:
        self.backwards += 1
        self.backward_site = event.pin()  # for the gradient checks of the first steps
        self.loss = event.tensor
        if self.backwards > self.GRAD_ALWAYS:
            self.loss = None
            doc.unsubscribe(self, "on_backward")

    def on_nonfinite_loss(self, doc: Reporter, event: BackwardEvent) -> None:
        self._done(doc)  # the first non-finite loss: its cause is the one to report
        cause = first_cause(doc, event)
        if cause is not None and cause.code == "nonfinite-grad":
            doc.add(_finding(cause.site, cause.params, cause.what, doc.steps))

    def on_scaler_step(self, doc: Reporter, event: ScalerStepEvent) -> None:
        # GradScaler checks and skips non-finite gradients itself: not a finding.
        self.in_scaler = True

    def on_pre_step(self, doc: Reporter, event: StepEvent) -> None:
        in_scaler, self.in_scaler = self.in_scaler, False
        if event.step > self.GRAD_ALWAYS:
            # Later, a non-finite gradient shows as NaN weights, then a NaN loss: the loss
            # check reports it then, so the steps stop paying here.
            doc.unsubscribe(self, "on_pre_step", "on_scaler_step")
            return
        if in_scaler:
            return
        grads = [p.grad for g in event.optimizer.param_groups for p in g["params"]
                 if p.grad is not None and not p.grad.is_sparse]  # fmt: skip
        if not grads or finite_norms(grads):
            return
        if self.loss is not None and not all_finite([self.loss.detach()]):
            # A loss on an accelerator is read only now and then (the host would wait):
            # this one is not finite, and the loss's probes explain it when they read it.
            return
        self._done(doc)
        if any(f.code in NONFINITE_CODES for f in doc.findings):
            return  # the consequence of a cause already reported
        names = {id(p): param_path(n, doc.model_name(r.module)) for r in doc.step_forwards
                 for n, p in r.module.named_parameters()}  # fmt: skip
        bad = [names.get(id(p), "?") for g in event.optimizer.param_groups for p in g["params"]
               if p.grad is not None and not all_finite([p.grad])]  # fmt: skip
        back = self.backward_site() if self.backward_site is not None else None
        if back is None:
            return
        # The fix goes at the operation whose gradient is singular (an eps in sqrt).
        site = singular_site(self.loss, back) if self.loss is not None else None
        what = "the gradients are NaN/Inf while the loss is finite"
        related = [{"file": back.file, "line": back.line, "what": "backward"}] if site else []
        doc.add(_finding(site or back, bad, what, doc.steps, related))

    def _done(self, doc: Reporter) -> None:
        """The first cause is found: what follows is its consequence."""
        doc.unsubscribe(self, "on_backward", "on_nonfinite_loss", "on_scaler_step",
                        "on_pre_step")  # fmt: skip


def _finding(
    site: Any, params: list[str], what: str, steps: int, related: list | None = None
) -> Finding:
    return Finding(
        code="nonfinite-grad",
        severity="error",
        file=site.file,
        line=site.line,
        message=f"{what} (first: {', '.join(params[:5]) or 'unknown'})",
        why="one non-finite gradient makes the weights NaN at the next step, and every loss "
        "after it",
        fix="find the operation with a singular gradient (sqrt, norm, log, acos, pow at 0: "
        "add an eps, e.g. torch.sqrt(x + 1e-8)); clip gradients "
        "(torch.nn.utils.clip_grad_norm_); torch.autograd.detect_anomaly() names the "
        "backward op",
        related=related or [],
        evidence={"parameters": params[:20], "step": steps + 1},
    )
