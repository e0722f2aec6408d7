"""The ``unregistered-module`` probe."""

from __future__ import annotations

from torch import nn

from trainwell.doctor.coverage import Coverage, plain_containers
from trainwell.doctor.events import CreatedEvent, ForwardEvent, Reporter, StepEvent
from trainwell.doctor.findings import Finding
from trainwell.doctor.modules import params_of
from trainwell.doctor.source import attribute_site
from trainwell.doctor.trackers import Trackers


class UnregisteredModuleProbe:
    """``unregistered-module``: after the third step (or at the end of a shorter run), a
    module or Parameter with trainable weights kept in a plain list, tuple or dict
    attribute of a model: invisible to ``parameters()``, ``.to()``, ``state_dict()``
    and ``train()``/``eval()``, and often to the optimizer. Frozen parts kept that way
    (a teacher in a list) are left alone.
    """

    CHECK_AT = 3

    def __init__(self) -> None:
        self.coverage: Coverage  # the run's, handed by attach
        self.steps = 0
        self.checked = False

    def attach(self, trackers: Trackers) -> None:
        self.coverage = trackers.get(Coverage)

    def on_optimizer_created(self, doc: Reporter, event: CreatedEvent) -> None:
        self.coverage.created_optimizer(event)

    def on_forward(self, doc: Reporter, event: ForwardEvent) -> None:
        if event.grad_enabled:
            self.coverage.trained(event.module)

    def on_step(self, doc: Reporter, event: StepEvent) -> None:
        self.coverage.stepped(event.optimizer)
        self.steps += 1
        if self.steps == self.CHECK_AT:
            self._check(doc)

    def on_end(self, doc: Reporter) -> None:
        if self.steps and not self.checked and not doc.crashed:
            self._check(doc)

    def _check(self, doc: Reporter) -> None:
        self.checked = True
        doc.unsubscribe(self, "on_forward", "on_optimizer_created", "on_step")
        optimized = self.coverage.optimized()
        for model in list(self.coverage.models):
            for module, attr, value, held in plain_containers(model):
                trainable = [p for m in held for p in params_of(m) if p.requires_grad]
                if trainable:  # frozen parts hidden on purpose (a teacher in a list)
                    self._report(doc, module, attr, value, held, trainable, optimized)

    def _report(
        self, doc: Reporter, module: nn.Module, attr: str, value: object, held: list,
        trainable: list, optimized: set[int],
    ) -> None:  # fmt: skip
        site = attribute_site(type(module), attr)
        if site is None:
            return
        # Even when their weights were handed to the optimizer by hand, they are missing
        # from state_dict() and deaf to train()/eval().
        outside = [p for p in trainable if id(p) not in optimized]
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
                message=f"`self.{attr}` of {type(module).__name__} is a plain {kind} of "
                f"{', '.join(classes)}: invisible to parameters(), .to(), state_dict() "
                "and train()/eval()",
                why=(f"{len(outside)} of its weight tensors are in no optimizer, so they "
                     "never train; " if outside else "")
                + "checkpoints do not save them and they stay on their device when the "
                "model moves",
                fix=f"wrap it: self.{attr} = {fix}(...)",
                evidence={"attribute": attr, "classes": classes, "parameters": len(trainable)},
            )
        )
