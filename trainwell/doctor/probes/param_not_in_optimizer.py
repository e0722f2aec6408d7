"""The ``param-not-in-optimizer`` probe."""

from __future__ import annotations

import weakref
from typing import Any

from torch import nn

from trainwell.doctor.coverage import Coverage, plain_containers
from trainwell.doctor.events import (
    BackwardEvent,
    CreatedEvent,
    EpochEndEvent,
    ForwardEvent,
    Reporter,
    StepEvent,
)
from trainwell.doctor.findings import Finding
from trainwell.doctor.graph import leaves
from trainwell.doctor.modules import params_of
from trainwell.doctor.sites import Site
from trainwell.doctor.source import param_path
from trainwell.doctor.trackers import Trackers


class ParamNotInOptimizerProbe:
    """``param-not-in-optimizer``: after the third step, a trainable parameter with a
    gradient that no optimizer holds: a model's, or a bare tensor the loss reaches, such
    as learned loss weights.

    The models are the modules whose forward ran with grad enabled; the optimizers are
    those created or stepped. Weights of modules kept in a plain list or dict are
    ``unregistered-module``'s (which hides them from the optimizer), not loose tensors.

    A model's parameters in no optimizer at that check (frozen ones, typically) stay
    watched: looked at every ``EVERY`` steps, at each pass over a data set's end (an
    epoch, an evaluation) and at the end of the run, one that was
    unfrozen since and gets gradients while still in no optimizer (an optimizer built
    over the trainable parameters only, then a fine-tuning unfreeze) is reported then.
    """

    CHECK_AT = 3
    EVERY = 50
    LEAF_WALK = 20_000  # graph nodes walked to find the loss's leaf tensors

    def __init__(self) -> None:
        self.coverage: Coverage  # the run's, handed by attach
        # the first losses' leaf tensors: id -> [tensor, backwards it was in]
        self.leaves: dict[int, list[Any]] = {}
        self.steps = 0
        self.checked = False
        # After the check: (weak model, weak parameter, its name) of those in no optimizer.
        self.watched: list[tuple[Any, Any, str]] = []
        self.site: Site | None = None

    def attach(self, trackers: Trackers) -> None:
        self.coverage = trackers.get(Coverage)

    def on_optimizer_created(self, doc: Reporter, event: CreatedEvent) -> None:
        self.coverage.created_optimizer(event)

    def on_forward(self, doc: Reporter, event: ForwardEvent) -> None:
        # The frame sends forwards of models only (modules with weights).
        if event.grad_enabled:
            self.coverage.trained(event.module)

    def on_step(self, doc: Reporter, event: StepEvent) -> None:
        self.coverage.stepped(event.optimizer)
        if self.checked:  # woken up to look at the watched parameters
            self._look_again(doc, event)
            return
        self.steps += 1
        if self.steps == self.CHECK_AT:
            self._check(doc, event)

    def on_backward(self, doc: Reporter, event: BackwardEvent) -> None:
        # The loss's leaves, for the first steps: trainable tensors outside any model.
        if self.steps < self.CHECK_AT and event.tensor.grad_fn is not None:
            for leaf in leaves(event.tensor.grad_fn, self.LEAF_WALK):
                # Held, so that its id means the same tensor at the next backward.
                seen = self.leaves.setdefault(id(leaf), [leaf, 0])
                seen[1] += 1
        elif self.steps >= self.CHECK_AT:
            doc.unsubscribe(self, "on_backward")

    def on_epoch_end(self, doc: Reporter, event: EpochEndEvent) -> None:
        # The engine evaluates after each epoch's last step: its gradients are still there.
        if self.checked:
            self._look_again(doc, None)

    def on_end(self, doc: Reporter) -> None:
        if self.steps and not self.checked and not doc.crashed:
            self._check(doc, None)
        elif self.watched and not doc.crashed:
            self._look_again(doc, None)

    def _check(self, doc: Reporter, event: StepEvent | None) -> None:
        self.checked = True
        doc.unsubscribe(self, "on_forward")
        optimized = self.coverage.optimized()
        site = self.site = self.coverage.optimizer_site(event)
        models = list(self.coverage.models)
        for model in models:
            root = doc.model_name(model)
            missing = [
                param_path(n, root)
                for n, p in model.named_parameters()
                if p.requires_grad and p.grad is not None and id(p) not in optimized
            ]
            if missing and site is not None:
                doc.add(_finding(site, model, missing))
            self.watched += [(weakref.ref(model), weakref.ref(p), param_path(n, root))
                             for n, p in model.named_parameters()
                             if id(p) not in optimized and not p.requires_grad]  # fmt: skip
        self._sleep(doc)
        # Trainable tensors the loss reaches that belong to no model (learned loss
        # weights, a temperature) and to no optimizer.
        # A tensor in the graphs of several steps persists like a weight; one made anew
        # each step (the interpolates of a gradient penalty) is an input.
        in_models = {id(p) for model in models for p in model.parameters()}
        in_models |= {id(p) for model in models for *_, held in plain_containers(model)
                      for m in held for p in params_of(m) if p.requires_grad}  # fmt: skip
        loose = [t for key, (t, backwards) in self.leaves.items()
                 if backwards > 1 and t.requires_grad and key not in optimized
                 and key not in in_models]  # fmt: skip
        self.leaves = {}
        # Only at a step: at the end of a short or crashed run the models and optimizers
        # may be gone already, and every weight would look loose.
        if loose and site is not None and event is not None:
            names = [f"tensor{tuple(t.shape)}" for t in loose]
            doc.add(_finding(site, None, names))

    def _sleep(self, doc: Reporter) -> None:
        if not self.watched:
            doc.unsubscribe(self, "on_optimizer_created", "on_step", "on_epoch_end")
            return
        # New optimizers still count (one made for the unfrozen part); steps only now and then.
        doc.unsubscribe(self, "on_step", until=(doc.steps // self.EVERY + 1) * self.EVERY)

    def _look_again(self, doc: Reporter, event: StepEvent | None) -> None:
        """Watched parameters that now get gradients, still in no optimizer."""
        optimized = self.coverage.optimized()
        found: dict[int, tuple[nn.Module, list[str]]] = {}
        still = []
        for model_ref, ref, name in self.watched:
            model, p = model_ref(), ref()
            if model is None or p is None or id(p) in optimized:
                continue
            if p.requires_grad and p.grad is not None:
                found.setdefault(id(model), (model, []))[1].append(name)
            else:
                still.append((model_ref, ref, name))
        self.watched = still
        site = self.site or (event.site if event is not None else None)
        for model, missing in found.values():
            if site is not None:
                doc.add(_finding(site, model, missing, unfrozen=True))
        if event is not None or not self.watched:
            self._sleep(doc)


def _finding(
    site: Site, model: nn.Module | None, missing: list[str], unfrozen: bool = False
) -> Finding:
    owner = f" of {type(model).__name__}" if model is not None else " outside any model"
    why = ("they never change: the gradients are computed (time and memory) and thrown "
           "away; often a layer added after the optimizer was built")  # fmt: skip
    fix = ("build the optimizer from model.parameters() after the model is complete; to "
           "freeze a part on purpose, call requires_grad_(False) on it")  # fmt: skip
    if unfrozen:
        why = ("they were frozen when the optimizer was built over the trainable parameters "
               "only, and were unfrozen since: they get gradients and never change")  # fmt: skip
        fix = ("build the optimizer over model.parameters() (frozen ones included: an "
               "optimizer skips parameters without a gradient), or add them when unfreezing: "
               "optimizer.add_param_group({'params': [...]})")  # fmt: skip
    return Finding(
        code="param-not-in-optimizer",
        severity="error",
        file=site.file,
        line=site.line,
        message=f"{len(missing)} trainable parameter(s){owner} get gradients but are in no "
        f"optimizer{' (unfrozen after it was built)' if unfrozen else ''}: "
        f"{', '.join(missing[:6])}" + (" ..." if len(missing) > 6 else ""),
        why=why,
        fix=fix,
        evidence={"parameters": missing[:50], "count": len(missing)},
    )
