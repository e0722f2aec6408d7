"""The ``step-before-backward`` probe, and ``loss-no-gradient``: an optimizer step with
no gradient in any parameter, told apart by what ran since the last step."""

from __future__ import annotations

import weakref
from typing import Any

from trainwell.doctor.events import BackwardEvent, LossEvent, Reporter, StepEvent
from trainwell.doctor.findings import Finding
from trainwell.doctor.graph import walk
from trainwell.doctor.nonfinite import _loss_assignment

# Operations whose gradient is zero wherever it is defined: a loss computed through one
# gives the weights nothing.
_FLAT = {"RoundBackward0": "torch.round", "SignBackward0": "torch.sign",
         "FloorBackward0": "torch.floor", "CeilBackward0": "torch.ceil",
         "TruncBackward0": "torch.trunc"}  # fmt: skip


class _State:
    __slots__ = ("steps", "stale", "zero", "off", "backwards_at_step", "zeroed_at")

    def __init__(self) -> None:
        self.steps = 0
        self.stale = 0  # steps in a row with no gradient: nothing backwarded, or cleared
        self.zero = 0  # steps in a row whose fresh backward gave all-zero gradients
        self.off = False
        self.backwards_at_step = 0  # the backward count at this optimizer's last step
        self.zeroed_at = -1  # the backward count at this optimizer's last zero_grad


class StepBeforeBackwardProbe:
    """At each of an optimizer's first steps: does any parameter hold a non-zero
    gradient? When none does three steps in a row, either no backward ran since the
    last step or a ``zero_grad`` ran after it (``step-before-backward``), or a backward
    ran and gave exact zeros: the loss gives no gradient (``loss-no-gradient``; e.g.
    ``cross_entropy`` over a one-output head, whose softmax is always 1).
    ``step(closure)`` and steps under a GradScaler are left alone.
    """

    CHECK = 12
    STREAK = 3

    def __init__(self) -> None:
        self.state: dict[int, _State] = {}
        self.backwards = 0
        self.backward_site: Any = None
        self.values: list[float | None] = []  # the losses of the last backwards
        self.reason: tuple[Any, str] | None = None  # (site, why) of a loss with no gradient
        self.scaled: set[int] = set()
        self.loss: Any = None  # the last tensor backwarded, weakly

    def _state(self, optimizer: Any) -> _State:
        st = self.state.get(id(optimizer))
        if st is None:
            st = self.state[id(optimizer)] = _State()
        return st

    def on_loss(self, doc: Reporter, event: LossEvent) -> None:
        x = event.input
        if event.name in ("cross_entropy", "nll_loss") and x.dim() >= 2 and x.shape[1] == 1:
            fn = "cross_entropy" if event.name == "cross_entropy" else "log_softmax + nll_loss"
            self.reason = (event.pin(), f"{fn} over a single output (shape "
                           f"{tuple(x.shape)}): the softmax of one logit is always 1, so the "
                           "loss is 0 whatever the model outputs")  # fmt: skip

    def on_backward(self, doc: Reporter, event: BackwardEvent) -> None:
        self.backwards += 1
        self.backward_site = event.pin()
        self.loss = weakref.ref(event.tensor)
        self.values = [*self.values[-(self.STREAK - 1):], event.value]

    def on_zero_grad(self, doc: Reporter, optimizer: Any) -> None:
        self._state(optimizer).zeroed_at = self.backwards

    def on_scaler_step(self, doc: Reporter, event: Any) -> None:
        self.scaled.add(id(event.optimizer))

    def on_pre_step(self, doc: Reporter, event: StepEvent) -> None:
        st = self._state(event.optimizer)
        if st.off:
            return
        if event.closure or id(event.optimizer) in self.scaled:
            self._stop(doc, st)
            return
        params = [p for g in event.optimizer.param_groups for p in g["params"]]
        grads = [p.grad for p in params if p.grad is not None]
        if any(bool(g.any()) for g in grads):
            st.stale = st.zero = 0
        elif grads and self.backwards > st.backwards_at_step and st.zeroed_at < self.backwards:
            st.zero += 1  # a fresh backward, not cleared since, left only zeros
            if st.zero >= self.STREAK:
                self._no_gradient(doc, event, st)
        else:
            st.stale += 1
            if st.stale >= self.STREAK:
                self._stale(doc, event, st)

    def on_step(self, doc: Reporter, event: StepEvent) -> None:
        st = self._state(event.optimizer)
        if st.off:
            return
        st.steps += 1
        st.backwards_at_step = self.backwards
        if st.steps >= self.CHECK:
            self._stop(doc, st)

    def _stop(self, doc: Reporter, st: _State) -> None:
        st.off = True
        if all(s.off for s in self.state.values()):
            doc.unsubscribe(self, "on_loss", "on_backward", "on_zero_grad", "on_scaler_step",
                            "on_pre_step", "on_step")  # fmt: skip

    def _related(self) -> list[dict[str, Any]]:
        back = self.backward_site() if self.backward_site is not None else None
        return [{"file": back.file, "line": back.line, "what": "backward"}] if back else []

    def _stale(self, doc: Reporter, event: StepEvent, st: _State) -> None:
        self._stop(doc, st)
        site = event.site
        if site is None:
            return
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
                related=self._related(),
                evidence={"steps_observed": st.steps + 1},
            )
        )

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

    def _no_gradient(self, doc: Reporter, event: StepEvent, st: _State) -> None:
        self._stop(doc, st)
        values = [v for v in self.values if v is not None]
        constant = len(values) == len(self.values) and len(set(values)) == 1
        if self.reason is not None:
            site, why = self.reason[0](), self.reason[1]
            fix = ("for one output per example use binary_cross_entropy_with_logits (or "
                   "BCEWithLogitsLoss) on float targets; for C classes give the head C "
                   "outputs")  # fmt: skip
        else:
            back = self.backward_site() if self.backward_site is not None else event.site
            site = (_loss_assignment(back) or back) if back is not None else None
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
                related=self._related(),
                evidence={"steps_observed": st.steps + 1, "loss": values[-1] if values else None},
            )
        )
