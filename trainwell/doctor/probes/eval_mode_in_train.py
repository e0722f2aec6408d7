"""The ``eval-mode-in-train`` probe."""

from __future__ import annotations

import ast
import types
import weakref
from typing import Any

from torch import nn

from trainwell.doctor.events import (
    ForwardEvent,
    ModeEvent,
    Reporter,
    StepEvent,
)
from trainwell.doctor.findings import Finding
from trainwell.doctor.modules import (
    DROPOUT,
    mode_modules,
)
from trainwell.doctor.sites import Site, is_user_file, parse
from trainwell.doctor.source import module_label


class EvalModeInTrainProbe:
    """``eval-mode-in-train``: a container module (a model, a backbone) in eval mode
    whose dropout modules, or batch norms with trainable weights, are updated by the
    optimizer: ``model.eval()`` for validation never undone, a pretrained backbone
    loaded in eval mode.

    Batch norms put in eval one by one (frozen statistics while fine-tuning) are a
    deliberate choice and stay silent, as do eval-mode parts whose weights are frozen,
    and, with no evaluation since, an ``eval()`` on a part right after ``train()`` on
    the whole (``norm_eval``) or inside the training loop itself (keeping a backbone's
    statistics frozen each epoch). An ``eval()`` followed by no-grad forwards (an
    evaluation) and then training is the forgotten ``model.train()``. Checked at the
    first steps and at the first steps after each mode switch.
    """

    CHECKS = 2  # steps looked at after each mode switch

    def __init__(self) -> None:
        self.eval_sites: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.forwards: dict[int, tuple[Any, Site | None]] = {}  # this step's models
        self.left = self.CHECKS
        self.last_train: Any = None  # weak ref to the module of the last train() call
        self.forward_since_train = False
        self.listening = True  # to training forwards

    def on_mode(self, doc: Reporter, event: ModeEvent) -> None:
        module = event.module
        if event.mode:
            self.last_train, self.forward_since_train = weakref.ref(module), False
        else:
            # model.train(); model.backbone.eval(): the backbone's statistics frozen on
            # purpose, the way detection codebases do it (norm_eval).
            parent = self.last_train() if self.last_train is not None else None
            refrozen = (
                parent is not None
                and parent is not module
                and not self.forward_since_train
                and any(m is module for m in parent.modules())
            )
            self.eval_sites[module] = _EvalRecord(event.site, module, refrozen)
        if not self.left:
            doc.subscribe(self, "on_step")  # the steps after a switch are looked at
        self.left = self.CHECKS
        self._listen(doc, True)

    def _listen(self, doc: Reporter, on: bool) -> None:
        """Training forwards are heard while steps after a switch are looked at, or
        until one shows that a forward ran since the last train()."""
        if on != self.listening:
            self.listening = on
            (doc.subscribe if on else doc.unsubscribe)(self, "on_forward")

    def on_forward(self, doc: Reporter, event: ForwardEvent) -> None:
        self.forward_since_train = True
        if not event.grad_enabled:
            return  # an evaluation: on_nograd_forward's
        if self.left and mode_modules(event.module, self.cache):
            self.forwards.setdefault(id(event.module), (weakref.ref(event.module), event.site))
        elif not self.left:
            self._listen(doc, False)  # the common case: training, no mode switched lately

    def on_nograd_forward(self, doc: Reporter, event: ForwardEvent) -> None:
        # An evaluation: of the module put in eval or of one of its parts (validation
        # through model.encoder(...) or a generate() method).
        self.forward_since_train = True
        for record in self.eval_sites.values():
            if id(event.module) in record.parts:
                record.evaluated = True

    def on_step(self, doc: Reporter, event: StepEvent) -> None:
        if not self.left:
            return
        self.left -= 1
        if not self.left:
            doc.unsubscribe(self, "on_step")  # until the next mode switch
        forwards, self.forwards = self.forwards, {}
        for ref, site in forwards.values():
            model = ref()
            if model is not None:
                self._check(doc, model, site)

    def _check(self, doc: Reporter, model: nn.Module, train_site: Site | None) -> None:
        if all(m.training for m in mode_modules(model, self.cache)):
            return  # the common case (model.train() called every step): nothing in eval
        for name, module in model.named_modules():
            if module.training or not any(True for _ in module.children()):
                continue
            stuck = [
                m
                for m in mode_modules(module, self.cache)
                if not m.training
                and (
                    isinstance(m, DROPOUT)
                    or any(p.requires_grad and p.grad is not None for p in m.parameters())
                )
            ]
            trained = any(p.requires_grad and p.grad is not None for p in module.parameters())
            if not stuck or not trained:
                continue
            record = self.eval_sites.get(module)
            on_purpose = record is not None and not record.evaluated and (
                record.refrozen or _in_loop_with(record.stack, train_site)
            )
            if on_purpose:
                return  # frozen statistics: right after train(), or each time round the loop
            site = (record.site if record is not None else None) or train_site
            if site is None:
                return
            related = []
            if train_site is not None and (train_site.file, train_site.line) != (
                site.file,
                site.line,
            ):
                related.append({"file": train_site.file, "line": train_site.line,
                                "what": "training forward"})  # fmt: skip
            label = module_label(name, module, doc.model_name(model))
            kinds = sorted({type(m).__name__ for m in stuck})
            doc.add(
                Finding(
                    code="eval-mode-in-train",
                    severity="error",
                    file=site.file,
                    line=site.line,
                    message=f"{label} is in eval mode while it trains: {len(stuck)} "
                    f"module(s) ({', '.join(kinds)}) run as in evaluation",
                    why="dropout is off (no regularization) and batch norm uses frozen "
                    "running statistics instead of the batch's: the model trains "
                    "differently from what you designed, often worse",
                    fix="call model.train() at the start of every training epoch (after "
                    "each evaluation); to freeze batch-norm statistics on purpose, set "
                    "only the BatchNorm modules to eval and freeze their weights",
                    related=related,
                    evidence={"module": label, "modules_in_eval": kinds},
                )
            )
            return  # the outermost one says it all


class _EvalRecord:
    """Where a module was put in eval mode, and what happened since."""

    def __init__(self, site: Site | None, module: nn.Module, refrozen: bool) -> None:
        self.site = site
        self.stack = _user_stack()  # every user line on the stack at the eval() call
        self.parts = {id(m) for m in module.modules()}
        self.refrozen = refrozen
        self.evaluated = False  # a no-grad forward of it since


def _user_stack() -> list[tuple[str, int]]:
    """(file, line) of every user frame on the stack, innermost first."""
    import sys

    frames: list[tuple[str, int]] = []
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            frames.append((frame.f_code.co_filename, frame.f_lineno))
        frame = frame.f_back
    return frames


def _in_loop_with(stack: list[tuple[str, int]], site: Site | None) -> bool:
    """Whether one of the lines in ``stack`` sits in a loop that also holds ``site``."""
    if site is None:
        return False
    for file, line in stack:
        if file != site.file:
            continue
        tree = parse(file)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if not isinstance(node, (ast.For, ast.While, ast.AsyncFor)):
                continue
            end = node.end_lineno or node.lineno
            if node.lineno <= line <= end and node.lineno <= site.line <= end:
                return True
    return False
