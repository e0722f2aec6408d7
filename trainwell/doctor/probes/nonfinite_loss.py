"""The ``nonfinite-loss`` probe."""

from __future__ import annotations

import math
import weakref
from collections import deque
from typing import Any

import torch
from torch import nn

from trainwell.doctor.events import (
    BackwardEvent,
    BatchEvent,
    ForwardEvent,
    Reporter,
    ScalerEvent,
    StepEvent,
)
from trainwell.doctor.findings import Finding
from trainwell.doctor.nonfinite import (
    _finite,
    _finite_norms,
    _float_param_device,
    _float_tensors,
    _input_finding,
    _loss_assignment,
    _loss_finding,
    _nan_data_in_graph,
    _replay,
)
from trainwell.doctor.source import param_path, qualified_names


class NonFiniteProbe:
    """``nonfinite-loss``, ``nonfinite-input`` and ``nonfinite-grad``: the first step whose
    loss, batch or gradients hold NaN/Inf, traced to where it began. Only the first
    cause is reported: everything after it is its consequence."""

    GRAD_ALWAYS = 16  # gradients checked at each of the first steps
    DEVICE_EVERY = 16  # a GPU loss flag is read this often

    def __init__(self) -> None:
        self.done = False
        self.batch: BatchEvent | None = None
        # this step's grad-enabled forwards: (model, args, kwargs, site, autocast)
        self.forwards: list[tuple[nn.Module, tuple, dict, Any, Any]] = []
        self.forwards_step = 0  # the optimizer step those forwards belong to
        self.backward_site: Any = None  # event.pin() of the last backward
        self.losses: deque[float] = deque(maxlen=50)  # recent finite losses (CPU only)
        self.bad_loss_step = -1
        self.flag: torch.Tensor | None = None  # GPU: any non-finite loss since last read
        self.backwards = 0
        self.in_scaler = False
        self.devices: weakref.WeakKeyDictionary[nn.Module, Any] = weakref.WeakKeyDictionary()

    def on_batch(self, doc: Reporter, event: BatchEvent) -> None:
        self.batch = event

    def on_forward(self, doc: Reporter, event: ForwardEvent) -> None:
        if not event.grad_enabled or self.done:
            return
        device = self.devices.get(event.module, False)
        if device is False:  # looked up once per module: parameters() walks the tree
            device = self.devices[event.module] = _float_param_device(event.module)
        if device is None:
            return  # no floating-point weights: a loss module, not a model
        autocast = None
        try:
            if torch.is_autocast_enabled(device.type):
                autocast = (device.type, torch.get_autocast_dtype(device.type))
        except RuntimeError:  # a device type autocast does not know (meta)
            pass
        # A step may chain models (a backbone, then a head): the NaN may come from any.
        if self.forwards_step != doc.steps:
            self.forwards, self.forwards_step = [], doc.steps  # a new step
        elif len(self.forwards) >= 4:
            self.forwards.pop(0)
        self.forwards.append((event.module, event.args, event.kwargs, event.pin(), autocast))

    def on_backward(self, doc: Reporter, event: BackwardEvent) -> None:
        if self.done:
            return
        self.backwards += 1
        if self.backwards <= self.GRAD_ALWAYS + 1:
            self.backward_site = event.pin()  # for the gradient checks of the first steps
        loss = event.tensor
        if loss.device.type != "cpu":
            # No host sync per step: the flag accumulates on the device.
            bad = ~torch.isfinite(loss.detach()).all()
            self.flag = bad if self.flag is None else self.flag | bad
            if self.backwards % self.DEVICE_EVERY or not bool(self.flag):
                return
        elif loss.numel() == 1:
            value = event.value  # a scalar on the CPU: cheaper than torch.isfinite
            if value is not None and math.isfinite(value):
                self.losses.append(value)
                return
        elif bool(torch.isfinite(loss.detach()).all()):
            return
        self.bad_loss_step = doc.steps
        self.backward_site = event.pin()
        self._done(doc)
        self._explain_loss(doc, event, loss.detach())

    def on_scaler_step(self, doc: Reporter, event: ScalerEvent) -> None:
        # GradScaler checks and skips non-finite gradients itself: not a finding.
        self.in_scaler = True

    def on_pre_step(self, doc: Reporter, event: StepEvent) -> None:
        in_scaler, self.in_scaler = self.in_scaler, False
        if event.step > self.GRAD_ALWAYS:
            # Later, a non-finite gradient shows as NaN weights, then a NaN loss: the loss
            # check reports it then (as nonfinite-grad), so the steps stop paying here.
            doc.unsubscribe(self, "on_pre_step", "on_scaler_step")
            return
        if self.done or in_scaler or self.bad_loss_step == doc.steps:
            return
        grads = [p.grad for g in event.optimizer.param_groups for p in g["params"]
                 if p.grad is not None and not p.grad.is_sparse]  # fmt: skip
        if not grads or _finite_norms(grads):
            return
        self._done(doc)
        names = self._param_names(doc)
        bad = [names.get(id(p), "?") for g in event.optimizer.param_groups for p in g["params"]
               if p.grad is not None and not _finite([p.grad])]  # fmt: skip
        self._report_grad(doc, bad, "the gradients are NaN/Inf while the loss is finite")

    def _done(self, doc: Reporter) -> None:
        """The first cause is found: what follows is its consequence."""
        self.done = True
        doc.unsubscribe(self, "on_batch", "on_forward", "on_backward", "on_scaler_step",
                        "on_pre_step")  # fmt: skip

    # ---- explaining a non-finite loss ---------------------------------------------------------

    def _explain_loss(self, doc: Reporter, event: BackwardEvent, loss: torch.Tensor) -> None:
        site = event.site
        if site is None:
            return
        # 1. The data was already bad.
        batch = self.batch
        if batch is not None and not _finite(_float_tensors(batch.batch)):
            where = batch.site or site
            what = f"batch {batch.index} of this pass over the DataLoader holds NaN/Inf"
            doc.add(_input_finding(where, what, {"batch_index": batch.index}))
            return
        trend = self._trend()
        evidence: dict[str, Any] = {"step": doc.steps + 1, "loss": str(loss.flatten()[0].item())}
        fwd_site = self.forwards[-1][3]() if self.forwards else None
        for model, args, kwargs, pinned, autocast in self.forwards:
            at = pinned()
            inputs = _float_tensors((args, kwargs))
            # Inputs made by an earlier model of this step are that model's business.
            if not _finite([t for t in inputs if t.grad_fn is None]):
                doc.add(_input_finding(at or site, "the model's input holds NaN/Inf", {}))
                return
            # 2. The weights were already bad: an earlier update was not finite.
            bad_params = [param_path(n, doc.model_name(model)) for n, p in model.named_parameters()
                          if not _finite([p.detach()])]  # fmt: skip
            if bad_params:
                self._report_grad(doc, bad_params, "the weights themselves are NaN/Inf: an "
                                  "earlier optimizer step applied non-finite values")  # fmt: skip
                return
            # 3. Replay the forward and find the first operation that went non-finite.
            names = qualified_names(model, doc.model_name(model))
            origin, finite_output = _replay(doc, model, args, kwargs, autocast, names)
            if origin is not None and origin["site"] is not None:
                module = origin["module"] or type(model).__name__
                what = (f"`{origin['op']}` in {module} turned finite inputs into NaN/Inf "
                        "(the model's first non-finite value)")  # fmt: skip
                evidence.update(module=module, op=origin["op"], inputs_finite=True)
                doc.add(_loss_finding(origin["site"], site, what, evidence, trend, at))
                return
            if not finite_output:
                what = "the model's output is NaN/Inf (the operation could not be told)"
                doc.add(_loss_finding(at or site, site, what, evidence, trend, at))
                return
        # 4. The models' outputs are finite: the loss, or what it compares them with.
        line = _loss_assignment(site) or site
        if _nan_data_in_graph(event.tensor):
            what = "a tensor the loss uses besides the model's output (the targets?) holds NaN"
            doc.add(_input_finding(line, what, {}))
            return
        evidence.update(model_output_finite=True)
        what = "the model's output is finite; the loss computation turned it into NaN/Inf"
        doc.add(_loss_finding(line, site, what, evidence, trend, fwd_site))

    def _trend(self) -> str:
        losses = list(self.losses)
        if len(losses) >= 5 and losses[-1] > 10 * max(min(losses), 1e-8) and losses[-1] > 1:
            return (f"the loss rose from {min(losses):.3g} to {losses[-1]:.3g} over the last "
                    f"{len(losses)} steps before it: the training diverged")  # fmt: skip
        return ""

    def _param_names(self, doc: Reporter) -> dict[int, str]:
        return {id(p): param_path(n, doc.model_name(f[0])) for f in self.forwards
                for n, p in f[0].named_parameters()}  # fmt: skip

    def _report_grad(self, doc: Reporter, params: list[str], what: str) -> None:
        site = self.backward_site() if self.backward_site is not None else None
        if site is None:
            return
        doc.add(
            Finding(
                code="nonfinite-grad",
                severity="error",
                file=site.file,
                line=site.line,
                message=f"{what} (first: {', '.join(params[:5]) or 'unknown'})",
                why="one non-finite gradient makes the weights NaN at the next step, and "
                "every loss after it",
                fix="find the operation with a singular gradient (sqrt, norm, log, acos, "
                "pow at 0: add an eps, e.g. torch.sqrt(x + 1e-8)); clip gradients "
                "(torch.nn.utils.clip_grad_norm_); torch.autograd.detect_anomaly() names "
                "the backward op",
                evidence={"parameters": params[:20], "step": doc.steps + 1},
            )
        )
