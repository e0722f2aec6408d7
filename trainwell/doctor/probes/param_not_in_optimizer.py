"""The ``param-not-in-optimizer`` probe (and ``unregistered-module``)."""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch import nn

from trainwell.doctor.events import (
    BackwardEvent,
    CreatedEvent,
    ForwardEvent,
    Reporter,
    StepEvent,
)
from trainwell.doctor.findings import Finding
from trainwell.doctor.graph import walk as _walk
from trainwell.doctor.modules import (
    _MODULE_INTERNALS,
    _held_modules,
    _params,
)
from trainwell.doctor.sites import Site
from trainwell.doctor.source import (
    attribute_site,
    param_path,
)


class ParamCoverageProbe:
    """``param-not-in-optimizer`` and ``unregistered-module`` (which hides weights from
    the optimizer: the two are told apart here).

    The models are the modules whose forward ran with grad enabled; the optimizers are
    those created or stepped. After the third step: a trainable parameter with a
    gradient that no optimizer holds (a model's, or a bare tensor the loss reaches, such
    as learned loss weights), and a module or Parameter with trainable weights kept in a
    plain list, tuple or dict attribute.
    """

    CHECK_AT = 3
    LEAF_WALK = 20_000  # graph nodes walked to find the loss's leaf tensors

    def __init__(self) -> None:
        self.models: weakref.WeakSet[nn.Module] = weakref.WeakSet()
        self.optimizers: weakref.WeakSet[Any] = weakref.WeakSet()
        self.created: dict[int, Site | None] = {}  # id(optimizer) -> where it was made
        self.known: set[int] = set()  # optimizers whose parameters are held
        # the first losses' leaf tensors: id -> [tensor, backwards it was in]
        self.leaves: dict[int, list[Any]] = {}
        self.held: set[int] = set()  # ids of every parameter an optimizer was given
        self.hidden: set[int] = set()  # weights of modules kept in plain containers
        self.steps = 0
        self.checked = False

    def on_optimizer_created(self, doc: Reporter, event: CreatedEvent) -> None:
        self.optimizers.add(event.obj)
        self.created[id(event.obj)] = event.site
        self._hold(event.obj)

    def _hold(self, optimizer: Any) -> None:
        # The ids of what it optimizes, kept: the optimizer may be gone when the run ends.
        self.held.update(id(p) for g in optimizer.param_groups for p in g["params"])

    def on_forward(self, doc: Reporter, event: ForwardEvent) -> None:
        # The frame sends forwards of models only (modules with weights).
        if event.grad_enabled and event.module not in self.models:
            self.models.add(event.module)

    def on_step(self, doc: Reporter, event: StepEvent) -> None:
        optimizer = event.optimizer
        self.optimizers.add(optimizer)
        self.steps += 1
        if id(optimizer) not in self.known:
            self.known.add(id(optimizer))
            self._hold(optimizer)
        if self.steps == self.CHECK_AT:
            self._check_coverage(doc, event)

    def on_backward(self, doc: Reporter, event: BackwardEvent) -> None:
        # The loss's leaves, for the first steps: trainable tensors outside any model.
        if self.steps < self.CHECK_AT and event.tensor.grad_fn is not None:
            for node in _walk(event.tensor.grad_fn, self.LEAF_WALK):
                leaf = getattr(node, "variable", None)
                if isinstance(leaf, torch.Tensor):
                    # Held, so that its id means the same tensor at the next backward.
                    seen = self.leaves.setdefault(id(leaf), [leaf, 0])
                    seen[1] += 1
        elif self.steps >= self.CHECK_AT:
            doc.unsubscribe(self, "on_backward")

    def on_end(self, doc: Reporter) -> None:
        if self.steps and not self.checked and not doc.crashed:
            self._check_coverage(doc, None)

    def _optimized(self) -> set[int]:
        live = {id(p) for opt in self.optimizers for g in opt.param_groups for p in g["params"]}
        return live | self.held

    def _optimizer_site(self, event: StepEvent | None) -> Site | None:
        # From the record, not the objects: at the end of a run the optimizer may be gone
        # (a main() that returned).
        for site in self.created.values():
            if site is not None:
                return site
        return event.site if event is not None else None

    def _check_coverage(self, doc: Reporter, event: StepEvent | None) -> None:
        self.checked = True
        doc.unsubscribe(self, "on_forward", "on_optimizer_created", "on_step")
        optimized = self._optimized()
        site = self._optimizer_site(event)
        for model in list(self.models):
            root = doc.model_name(model)
            missing = [
                param_path(n, root)
                for n, p in model.named_parameters()
                if p.requires_grad and p.grad is not None and id(p) not in optimized
            ]
            if missing and site is not None:
                doc.add(_not_in_optimizer(site, model, missing))
            self._unregistered(doc, model, optimized)
        # Trainable tensors the loss reaches that belong to no model (learned loss
        # weights, a temperature) and to no optimizer.
        # A tensor in the graphs of several steps persists like a weight; one made anew
        # each step (the interpolates of a gradient penalty) is an input.
        in_models = {id(p) for model in self.models for p in model.parameters()}
        in_models |= self.hidden
        loose = [t for key, (t, backwards) in self.leaves.items()
                 if backwards > 1 and t.requires_grad and key not in optimized
                 and key not in in_models]  # fmt: skip
        self.leaves = {}
        # Only at a step: at the end of a short or crashed run the models and optimizers
        # may be gone already, and every weight would look loose.
        if loose and site is not None and event is not None:
            names = [f"tensor{tuple(t.shape)}" for t in loose]
            doc.add(_not_in_optimizer(site, None, names))

    def _unregistered(self, doc: Reporter, model: nn.Module, optimized: set[int]) -> None:
        for module in model.modules():
            for attr, value in vars(module).items():
                if attr in _MODULE_INTERNALS or not isinstance(value, (list, tuple, dict)):
                    continue
                held = _held_modules(value)
                if not held:
                    continue
                trainable = [p for m in held for p in _params(m) if p.requires_grad]
                self.hidden.update(id(p) for p in trainable)  # reported here, not as loose
                if not trainable:
                    continue  # frozen parts hidden on purpose (a teacher kept in a list)
                # Even when their weights were handed to the optimizer by hand, they are
                # missing from state_dict() and deaf to train()/eval().
                outside = [p for p in trainable if id(p) not in optimized]
                site = attribute_site(type(module), attr)
                if site is None:
                    continue
                kind = "dict" if isinstance(value, dict) else type(value).__name__
                classes = sorted({type(m).__name__ for m in held})
                fix = "nn.ModuleDict" if isinstance(value, dict) else "nn.ModuleList"
                if all(isinstance(m, nn.Parameter) for m in held):
                    fix = "nn.ParameterDict" if isinstance(value, dict) else "nn.ParameterList"
                doc.add(
                    Finding(
                        code="unregistered-module",
                        severity="error",
                        file=site.file,
                        line=site.line,
                        message=f"`self.{attr}` of {type(module).__name__} is a plain {kind} "
                        f"of {', '.join(classes)}: invisible to parameters(), .to(), "
                        "state_dict() and train()/eval()",
                        why=(f"{len(outside)} of its weight tensors are in no optimizer, so "
                             "they never train; " if outside else "")
                        + "checkpoints do not save them and they stay on their device when "
                        "the model moves",
                        fix=f"wrap it: self.{attr} = {fix}(...)",
                        evidence={
                            "attribute": attr,
                            "classes": classes,
                            "parameters": len(trainable),
                        },  # fmt: skip
                    )
                )

def _not_in_optimizer(site: Site, model: nn.Module | None, missing: list[str]) -> Finding:
    owner = f" of {type(model).__name__}" if model is not None else " outside any model"
    return Finding(
        code="param-not-in-optimizer",
        severity="error",
        file=site.file,
        line=site.line,
        message=f"{len(missing)} trainable parameter(s){owner} get gradients but are in no "
        f"optimizer: {', '.join(missing[:6])}"
        + (" ..." if len(missing) > 6 else ""),
        why="they never change: the gradients are computed (time and memory) and thrown "
        "away; often a layer added after the optimizer was built",
        fix="build the optimizer from model.parameters() after the model is complete; to "
        "freeze a part on purpose, call requires_grad_(False) on it",
        evidence={"parameters": missing[:50], "count": len(missing)},
    )
