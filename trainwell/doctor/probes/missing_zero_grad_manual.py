"""The ``missing-zero-grad`` probe for updates made without ``optimizer.step()``: a
hand-written SGD update (``p.data.add_(p.grad, alpha=-lr)``) and the calls of an
LBFGS closure within one step. It also counts a hand-written update as a step."""

from __future__ import annotations

import ast
from typing import Any

import torch

from trainwell.doctor.events import BackwardEvent, CreatedEvent, ForwardEvent, Reporter, StepEvent
from trainwell.doctor.findings import Finding
from trainwell.doctor.graph import leaves
from trainwell.doctor.sites import Site, parse


class MissingZeroGradManualProbe:
    """``missing-zero-grad`` where no ``optimizer.step()`` shows it: gradients left in
    ``.grad`` across a hand-written weight update, or across the calls of a closure.

    One parameter (with enough elements to tell) is watched by a gradient hook, which
    runs before the new gradient is added to ``.grad``. When the parameter's version
    counter moved since the last hook (the weights were updated in between) and its
    ``.grad`` still holds a non-zero gradient, the update's gradient was never cleared.
    Deliberate accumulation clears after each update, so it stays silent. Watched when
    no optimizer steps (a manual update; each update then counts as a step) and inside
    ``step(closure)`` (LBFGS calls the closure several times per step, from its first
    step on: looked for in the first ``CLOSURE_STEPS`` steps of the run and of each new
    optimizer).
    """

    STREAK = 3
    CHECK = 40  # hooks looked at
    CLOSURE_STEPS = 3

    def __init__(self) -> None:
        self.model: Any = None
        self.param: torch.Tensor | None = None
        self.handle: Any = None
        self.version: Any = None  # the watched weights at the last counted update
        self.seen: Any = None  # and at the last gradient hook
        self.streak = 0
        self.hooks = 0
        self.optimizer_steps = 0
        self.site: Any = None  # (pin) of the step or the first backward
        self.doc: Reporter | None = None  # set when the weights are first watched
        self.closure = False
        self.backward: Any = None  # (pin) of the first backward inside a closure
        self.done = False
        self.plain = 0  # steps without a closure since the run or an optimizer began

    def on_forward(self, doc: Reporter, event: ForwardEvent) -> None:
        if event.grad_enabled and self.model is None:
            self.model = event.module
            doc.unsubscribe(self, "on_forward")

    def on_optimizer_created(self, doc: Reporter, event: CreatedEvent) -> None:
        self.optimizer_steps = -1  # an optimizer exists: updates go through its step
        if not self.done and not self.closure:
            self.plain = 0
            doc.subscribe(self, "on_pre_step")  # its first steps: a closure?

    def on_backward(self, doc: Reporter, event: BackwardEvent) -> None:
        if self.closure and self.backward is None:
            self.backward = event.pin()  # the closure's backward: where the fix goes
        if self.optimizer_steps or self.param is None and self.done:
            return
        if self.param is None:
            self.site = event.pin()
            # No model: tensors made with requires_grad=True, updated by hand; the leaves
            # that this backward fills are the weights.
            params = self.model.parameters() if self.model is not None else _leaves(event.tensor)
            self._watch(doc, params)
            return
        if self._moved("version"):
            doc.count_step()  # a manual update since the last backward

    def on_pre_step(self, doc: Reporter, event: StepEvent) -> None:
        if event.closure and not self.done and (self.param is None or not self.closure):
            if self.handle is not None:
                self.handle.remove()
            self.closure, self.site = True, event.pin()
            params = [p for g in event.optimizer.param_groups for p in g["params"]]
            self._watch(doc, params)
            # Watched from here by the gradient hook; the closure's backward is the fix's.
            doc.subscribe(self, "on_backward")
            doc.unsubscribe(self, "on_pre_step")
        elif not event.closure:
            self.plain += 1
            if self.plain >= self.CLOSURE_STEPS:
                doc.unsubscribe(self, "on_pre_step")  # a plain optimizer: no closure

    def on_step(self, doc: Reporter, event: StepEvent) -> None:
        self.optimizer_steps = max(self.optimizer_steps, 0) + 1
        if not self.closure:
            if self.param is not None and not self.done:
                self._stop(doc)  # an optimizer steps: the wiring probe judges it
            # Updates go through optimizer.step(): there is no hand-written one to count.
            doc.unsubscribe(self, "on_step", "on_backward", "on_forward")

    def on_end(self, doc: Reporter) -> None:
        manual = self.param is not None and not self.closure and not self.optimizer_steps
        if manual and self._moved("version"):
            doc.steps += 1  # the last update, with no backward after it
        self._stop(doc)

    def _watch(self, doc: Reporter, params: Any) -> None:
        trainable = [p for p in params if p.requires_grad]
        if not trainable:
            return
        # The last big one: usually the output layer, whose gradient is dense (an
        # embedding's rows move only for the tokens in the batch); a one-element
        # parameter (a temperature) cannot tell a sum of gradients from one.
        big = [p for p in trainable if p.numel() >= 8]
        self.param = big[-1] if big else max(trainable, key=lambda p: p.numel())
        self.version = self.seen = _fingerprint(self.param)
        self.doc = doc
        self.handle = self.param.register_hook(self._arrived)

    def _arrived(self, grad: torch.Tensor) -> None:
        p = self.param
        if p is None or self.done:
            return
        self.hooks += 1
        updated = self._moved("seen")
        if updated:
            left = p.grad is not None and bool(p.grad.detach().ne(0).any())
            self.streak = self.streak + 1 if left else 0
            if self.streak >= self.STREAK:
                self._report()
        if self.hooks >= self.CHECK and self.handle is not None:
            self.handle.remove()  # judged; a manual update is still counted as a step
            self.handle = None

    def _moved(self, mark: str) -> bool:
        """Whether the watched weights changed since ``mark`` was taken (and retake it).
        Values, not the version counter: ``p.data.add_(...)`` does not bump it."""
        if self.param is None:  # nothing watched yet: nothing moved
            return False
        now = _fingerprint(self.param)
        moved = not torch.equal(now, getattr(self, mark))
        setattr(self, mark, now)
        return moved

    def _stop(self, doc: Reporter) -> None:
        self.done = True
        if self.handle is not None:
            self.handle.remove()
            self.handle = None
        if doc is None:
            return
        doc.unsubscribe(self, "on_pre_step", "on_forward")
        if self.closure or self.param is None or self.optimizer_steps:
            doc.unsubscribe(self, "on_backward")  # else still counting manual updates

    def _related(self) -> list[dict[str, Any]]:
        back = self.backward() if self.backward is not None else None
        if back is None or not self.closure:
            return []
        return [{"file": back.file, "line": back.line, "what": "backward in the closure"}]

    def _report(self) -> None:
        doc = self.doc
        if doc is None:  # reported from the gradient hook: set by _watch, before the hook
            return
        self._stop(doc)
        site = self.site() if self.site is not None else None
        if site is None:
            return
        line = site.line if self.closure else (_update_line(site) or site.line)
        where = ("inside the closure: each closure call adds to the gradient of the last"
                 if self.closure else "between hand-written weight updates")  # fmt: skip
        fix = ("call optimizer.zero_grad() at the start of the closure, before "
               "loss.backward()" if self.closure else
               "clear the gradients after each update: model.zero_grad() (or p.grad = None "
               "for each parameter)")  # fmt: skip
        doc.add(
            Finding(
                code="missing-zero-grad",
                severity="error",
                file=site.file,
                line=line,
                message=f"gradients are never cleared {where}: each update applies the sum "
                "of every gradient so far, not this batch's",
                why="PyTorch adds new gradients into .grad; without clearing them the update "
                "grows step by step and the model stops learning (or diverges)",
                fix=fix,
                related=self._related(),
                evidence={"updates_observed": self.hooks},
            )
        )


def _leaves(loss: torch.Tensor) -> list[torch.Tensor]:
    """The tensors a backward from ``loss`` fills, the first layer's first."""
    root = loss.grad_fn
    return list(leaves(root, 20_000))[::-1] if root is not None else []


def _fingerprint(p: torch.Tensor) -> torch.Tensor:
    flat = p.detach().reshape(-1)
    return flat[:: max(1, flat.numel() // 64)][:64].clone()


def _update_line(backward: Site) -> int | None:
    """The hand-written update after the backward: an in-place op or ``-=`` whose
    arguments read ``.grad`` (``p.data.add_(p.grad, alpha=-lr)``, ``p -= lr * p.grad``)."""
    tree = parse(backward.file)
    if tree is None:
        return None
    lines = []
    for n in ast.walk(tree):
        grads: ast.expr | None = None
        if isinstance(n, ast.AugAssign):
            grads, line = n.value, n.lineno
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and (
            n.func.attr.endswith("_") and n.func.attr != "zero_"
        ):
            grads, line = n, n.lineno
        if grads is not None and any(
            isinstance(a, ast.Attribute) and a.attr == "grad" for a in ast.walk(grads)
        ):
            lines.append(line)
    after = [line for line in lines if line > backward.line]
    return min(after) if after else (min(lines) if lines else None)
