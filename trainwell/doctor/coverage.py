"""Which weights the optimizers hold: the models trained (those whose forward ran with
grad enabled), the optimizers made or stepped, and where the first was made. What the
``param-not-in-optimizer`` and ``unregistered-module`` probes both judge by."""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import Any

from torch import nn

from trainwell.doctor.events import CreatedEvent, StepEvent
from trainwell.doctor.modules import MODULE_INTERNALS, held_modules
from trainwell.doctor.sites import Site


class Coverage:
    """The models and optimizers of a run, and the ids of every weight an optimizer
    was given (kept: at the end of a run the optimizer itself may be gone). One per run
    (:class:`~trainwell.doctor.trackers.Trackers`), fed by each probe that follows it:
    every update is idempotent, so the second probe to tell it an event changes
    nothing."""

    def __init__(self) -> None:
        self.models: weakref.WeakSet[nn.Module] = weakref.WeakSet()
        self.optimizers: weakref.WeakSet[Any] = weakref.WeakSet()
        self.created: dict[int, Site | None] = {}  # id(optimizer) -> where it was made
        self.known: set[int] = set()  # optimizers whose parameters are held
        self.held: set[int] = set()  # ids of every parameter an optimizer was given

    def created_optimizer(self, event: CreatedEvent) -> None:
        self.optimizers.add(event.obj)
        self.created[id(event.obj)] = event.site
        self._hold(event.obj)

    def trained(self, model: nn.Module) -> None:
        if model not in self.models:
            self.models.add(model)

    def stepped(self, optimizer: Any) -> None:
        self.optimizers.add(optimizer)
        if id(optimizer) not in self.known:
            self.known.add(id(optimizer))
            self._hold(optimizer)

    def _hold(self, optimizer: Any) -> None:
        self.held.update(id(p) for g in optimizer.param_groups for p in g["params"])

    def optimized(self) -> set[int]:
        live = {id(p) for opt in self.optimizers for g in opt.param_groups for p in g["params"]}
        return live | self.held

    def optimizer_site(self, event: StepEvent | None) -> Site | None:
        # From the record, not the objects: at the end of a run the optimizer may be gone
        # (a main() that returned).
        for site in self.created.values():
            if site is not None:
                return site
        return event.site if event is not None else None


def plain_containers(model: nn.Module) -> Iterator[tuple[nn.Module, str, Any, list[Any]]]:
    """(module, attribute, container, the modules and Parameters it holds) for each
    plain list, tuple or dict attribute of ``model``'s modules that holds some."""
    for module in model.modules():
        for attr, value in vars(module).items():
            if attr in MODULE_INTERNALS or not isinstance(value, (list, tuple, dict)):
                continue
            held = held_modules(value)
            if held:
                yield module, attr, value, held
