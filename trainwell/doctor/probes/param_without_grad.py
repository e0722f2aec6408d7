"""The ``param-without-grad`` probe."""

from __future__ import annotations

import weakref
from typing import Any

from torch import nn

from trainwell.doctor.events import CreatedEvent, ForwardEvent, Reporter, StepEvent
from trainwell.doctor.findings import Finding
from trainwell.doctor.modules import parent_of
from trainwell.doctor.sites import Site
from trainwell.doctor.source import (
    attribute_site,
    graph_cut_site,
    module_label,
    module_path,
    user_class,
    uses_attribute,
)


class ParamWithoutGradProbe:
    """``param-without-grad``: at the end of the run, a parameter an optimizer holds
    that never had a gradient at a step (looked at every step for the first ``WATCH``
    steps, then every ``EVERY``: a part unfrozen late is seen), named by the module that
    holds it, at the line that explains why (an attribute the forward never uses, a
    graph cut, a branch never taken). The models are those whose forward ran with grad
    enabled in the first ``CHECK_AT`` steps. Once every parameter of the optimizers seen
    has had a gradient there is nothing left to watch, until a new optimizer comes."""

    CHECK_AT = 3
    WATCH = 100
    EVERY = 100

    def __init__(self) -> None:
        self.models: weakref.WeakSet[nn.Module] = weakref.WeakSet()
        self.created: dict[int, Site | None] = {}  # id(optimizer) -> where it was made
        self.never: dict[int, tuple[Any, Any]] = {}  # id(p) -> (weak p, optimizer's id)
        self.known: set[int] = set()  # optimizers whose parameters are in `never`
        # optimizers that had some gradient at a step (one that never did has a wiring
        # bug of its own, step-before-backward, not one parameter without gradient)
        self.fed: set[int] = set()
        self.judged = False

    def on_optimizer_created(self, doc: Reporter, event: CreatedEvent) -> None:
        self.created[id(event.obj)] = event.site
        if not self.judged:
            doc.subscribe(self, "on_step")  # its parameters are to be watched

    def on_forward(self, doc: Reporter, event: ForwardEvent) -> None:
        if doc.steps >= self.CHECK_AT:
            doc.unsubscribe(self, "on_forward")  # the models of the first steps are judged
        elif event.grad_enabled and event.module not in self.models:
            self.models.add(event.module)

    def on_step(self, doc: Reporter, event: StepEvent) -> None:
        optimizer = event.optimizer
        if self.judged:
            return
        if id(optimizer) not in self.known:
            self.known.add(id(optimizer))
            for g in optimizer.param_groups:
                for p in g["params"]:
                    if p.requires_grad:
                        self.never[id(p)] = (weakref.ref(p), id(optimizer))
        if event.step <= self.WATCH or event.step % self.EVERY == 0:
            self._update_never()
        if not self.never and event.step >= self.CHECK_AT:
            doc.unsubscribe(self, "on_step")  # every parameter had a gradient
        elif event.step >= self.WATCH:  # asleep until the next look
            doc.unsubscribe(self, "on_step", until=(event.step // self.EVERY + 1) * self.EVERY)

    def on_end(self, doc: Reporter) -> None:
        if doc.steps >= self.CHECK_AT:
            self._update_never()
            self._judge_unused(doc)

    def _optimizer_site(self) -> Site | None:
        # From the record, not the objects: at the end of a run the optimizer may be gone
        # (a main() that returned).
        return next((site for site in self.created.values() if site is not None), None)

    def _update_never(self) -> None:
        for key, (ref, opt) in list(self.never.items()):
            p = ref()
            if p is None or p.grad is not None:
                del self.never[key]
                self.fed.add(opt)

    def _judge_unused(self, doc: Reporter) -> None:
        if self.judged:
            return
        self.judged = True
        doc.unsubscribe(self, "on_forward", "on_step", "on_optimizer_created")
        never = {key: ref() for key, (ref, opt) in self.never.items() if opt in self.fed}
        never = {k: p for k, p in never.items() if p is not None and p.grad is None}
        if not never:
            return
        for model in list(self.models):
            for name, module in model.named_modules():
                own = [n for n, p in module.named_parameters(recurse=False) if id(p) in never]
                if own:
                    self._report_unused(doc, model, name, module, own)

    def _report_unused(
        self, doc: Reporter, model: nn.Module, name: str, module: nn.Module, params: list[str]
    ) -> None:
        # A parameter of the user's own class (``self.scale = nn.Parameter(...)``) is its
        # attribute; a library module's (a Linear's weight) is reached through the module.
        direct = user_class(type(module)) is not None
        parent, attr = (module, params[0]) if direct else parent_of(model, name)
        site, how = None, ""
        if parent is not None and attr:
            used = uses_attribute(type(parent), attr)
            if used is False:
                site = attribute_site(type(parent), attr)
                how = f"`self.{attr}` is never used in {type(parent).__name__}.forward"
            elif used:
                site = graph_cut_site(type(parent))
                if site is not None:
                    how = "the forward cuts the graph (detach / .data / no_grad) before it"
                else:
                    # Named in the forward, yet no gradient: a branch that never runs.
                    site = attribute_site(type(parent), attr)
                    how = (f"`self.{attr}` is only used in a branch of "
                           f"{type(parent).__name__}.forward that never ran")  # fmt: skip
        if site is None:
            site = self._optimizer_site()
            how = how or "no gradient reaches it"
        if site is None:
            return
        root = doc.model_name(model)
        label = (", ".join(f"`{module_path(name, root)}.{p}`" for p in params) if direct
                 else f"{module_label(name, module, root)} ({', '.join(params)})")  # fmt: skip
        doc.add(
            Finding(
                code="param-without-grad",
                severity="warning",
                file=site.file,
                line=site.line,
                message=f"{label} is in the optimizer but never "
                f"received a gradient in {doc.steps} steps: {how}",
                why="a part meant to train stays at its initial weights (or weight decay "
                "alone shrinks it)",
                fix="use it in the forward, remove the .detach()/.data that cuts it off, or "
                "freeze it on purpose with requires_grad_(False) and leave it out of the "
                "optimizer",
                evidence={"module": label, "parameters": params},
            )
        )
