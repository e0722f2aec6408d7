"""The ``missing-zero-grad`` probe."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from trainwell.doctor.events import (
    CreatedEvent,
    Reporter,
    ScalerStepEvent,
    StepEvent,
    ZeroGradEvent,
)
from trainwell.doctor.findings import Finding
from trainwell.doctor.sites import user_frame
from trainwell.doctor.uncleared import describe, wording, zeroed_by

SLICE = 256  # gradient elements compared: enough to tell, cheap to copy


def _slice(t: torch.Tensor) -> torch.Tensor:
    return t.detach().reshape(-1)[:SLICE].float().clone()


class _Watch:
    """One optimizer's sample parameter: its gradient after the last step, and the sum
    of the gradients that flowed into it since."""

    def __init__(self, param: nn.Parameter, grad: torch.Tensor) -> None:
        self.param = param
        self.after_step = _slice(grad)
        self.incoming = torch.zeros_like(self.after_step)
        self.flowed = 0
        self.handle = param.register_hook(self._arrived)

    def _arrived(self, grad: torch.Tensor) -> None:
        self.incoming += _slice(grad)
        self.flowed += 1

    def remove(self) -> None:
        self.handle.remove()


class MissingZeroGradProbe:
    """``missing-zero-grad``: gradients never cleared between optimizer steps.

    For each optimizer one parameter with a non-zero gradient is watched over its first
    steps: a hook sums the gradients arriving into it between two steps. At the next
    step, a gradient proportional to *the previous step's gradient plus the new ones*
    (proportional: clipping rescales it) was never cleared (deliberate accumulation
    clears at each step; a GAN's generator backward that passes through the
    discriminator is cleared before the discriminator steps). ``step(closure)`` (LBFGS:
    the manual-update probe looks inside the closure) and steps under a GradScaler (it
    rescales the gradients in place) are left alone. The finding names the optimizer and
    the model whose parameters pile up; when the script zeroes other optimizers (a GAN's
    ``reset_grad()`` that forgets one), it points at that ``zero_grad()``: the fix goes
    beside it.
    """

    CHECK = 12  # steps of each optimizer looked at
    STREAK = 3  # consecutive bad steps before a finding
    _EVENTS = ("on_pre_step", "on_step", "on_scaler_step", "on_zero_grad")

    def __init__(self) -> None:
        self.state: dict[int, dict[str, Any]] = {}
        self.scaled: set[int] = set()
        self.zeroed: dict[int, Any] = {}  # id(optimizer) -> (its name, its zero_grad's line)

    def on_optimizer_created(self, doc: Reporter, event: CreatedEvent) -> None:
        # A second phase with an optimizer of its own (a student after its teacher, a
        # fine-tune after a pre-train): its first steps are judged as the first's were.
        if self.state and all(s["off"] for s in self.state.values()):
            self.zeroed = {}  # the earlier phase's zero_grad() is not beside this one's
            doc.subscribe(self, *self._EVENTS)

    def on_zero_grad(self, doc: Reporter, event: ZeroGradEvent) -> None:
        optimizer = event.optimizer
        if id(optimizer) not in self.zeroed:  # once per optimizer: a stack walk
            self.zeroed[id(optimizer)] = zeroed_by(optimizer)

    def _state(self, optimizer: Any) -> dict[str, Any]:
        st = self.state.get(id(optimizer))
        if st is None:
            st = self.state[id(optimizer)] = {"steps": 0, "watch": None, "missing": 0,
                                              "off": False}  # fmt: skip
        return st

    def on_scaler_step(self, doc: Reporter, event: ScalerStepEvent) -> None:
        self.scaled.add(id(event.optimizer))

    def on_pre_step(self, doc: Reporter, event: StepEvent) -> None:
        st = self._state(event.optimizer)
        if st["off"]:
            return
        if event.closure or id(event.optimizer) in self.scaled:
            # The closure makes its gradients inside the step (the manual-update probe
            # looks there); the scaler rescales the gradients in place.
            self._stop(st, doc)
            return
        watch: _Watch | None = st["watch"]
        if watch is None or watch.flowed == 0:
            return
        grad = watch.param.grad
        now = _slice(grad) if grad is not None else None
        if now is None or not bool(now.any()):
            return
        carried = _carried(now, watch.after_step, watch.incoming)
        if carried:
            st["missing"] += 1
            if st["missing"] >= self.STREAK:
                self._missing(doc, event, st)
        elif carried is False:
            st["missing"] = 0

    def on_step(self, doc: Reporter, event: StepEvent) -> None:
        st = self._state(event.optimizer)
        if st["off"]:
            return
        st["steps"] += 1
        if st["watch"] is not None:
            st["watch"].remove()
            st["watch"] = None
        if st["steps"] >= self.CHECK:
            self._stop(st, doc)
            return
        # A parameter with enough elements: a one-element gradient (a learned
        # temperature) is proportional to any other, so it cannot tell a sum from one.
        params = [p for g in event.optimizer.param_groups for p in g["params"]]
        for p in sorted(params, key=lambda p: p.numel() < 8):
            if p.grad is not None and not p.grad.is_sparse and bool(_slice(p.grad).any()):
                st["watch"] = _Watch(p, p.grad)
                return

    def on_end(self, doc: Reporter) -> None:
        for st in self.state.values():
            self._stop(st)

    def _stop(self, st: dict[str, Any], doc: Reporter | None = None) -> None:
        st["off"] = True
        if st["watch"] is not None:
            st["watch"].remove()
            st["watch"] = None
        if doc is not None and all(s["off"] for s in self.state.values()):
            # Every optimizer seen is judged: later steps cost nothing.
            doc.unsubscribe(self, *self._EVENTS)

    def _missing(self, doc: Reporter, event: StepEvent, st: dict[str, Any]) -> None:
        param = st["watch"].param if st["watch"] is not None else None
        self._stop(st, doc)
        frame = user_frame()
        site = event.site
        if site is None:
            return
        who = describe(doc, event.optimizer, param, frame, self.zeroed, site)
        message, fix = wording(who)
        line = who.site or site
        what = f"{who.optimizer}.step()" if who.optimizer else "the optimizer's step"
        related = [{"file": site.file, "line": site.line, "what": what}] if who.site else []
        doc.add(
            Finding(
                code="missing-zero-grad",
                severity="error",
                file=line.file,
                line=line.line,
                message=message,
                why="PyTorch adds new gradients into .grad; without zero_grad the update "
                "grows step by step and the model stops learning (or diverges)",
                fix=fix,
                related=related,
                evidence={"steps_observed": st["steps"] + 1, "optimizer": who.optimizer,
                          "model": who.model, "cleared": who.cleared},  # fmt: skip
            )
        )


def _carried(now: torch.Tensor, before: torch.Tensor, incoming: torch.Tensor) -> bool | None:
    """Whether the gradient ``now`` still holds the previous step's (``before``) besides
    the gradients that arrived since: True when it is proportional to their sum (the
    scale allows for clipping, which rescales in place), False when it is proportional to
    the new gradients alone, None when it cannot be told.

    Example:
        >>> a, b = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])
        >>> _carried(0.5 * (a + b), a, b), _carried(b, a, b), _carried(a, a, b)
        (True, False, None)
    """
    if _parallel(now, incoming):
        return False
    if _parallel(now, before + incoming):
        return True
    return None


def _parallel(a: torch.Tensor, b: torch.Tensor, tol: float = 1e-4) -> bool:
    """``a`` is a positive multiple of ``b``, to ``tol`` relative."""
    a, b = a.double(), b.double()
    norm = b.dot(b)
    if norm == 0:
        return False
    k = a.dot(b) / norm
    return bool(k > 0 and (a - k * b).norm() <= tol * a.norm())
