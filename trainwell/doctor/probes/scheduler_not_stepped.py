"""The ``scheduler-not-stepped`` probe."""

from __future__ import annotations

from trainwell.doctor.events import (
    CreatedEvent,
    EpochEndEvent,
    Reporter,
    ScalerStepEvent,
    SchedulerStepEvent,
    StepEvent,
)
from trainwell.doctor.findings import Finding
from trainwell.doctor.sites import Site, here


class SchedulerNotSteppedProbe:
    """``scheduler-not-stepped``: an LR scheduler never stepped while its optimizer
    trained through at least two epochs, or stepped before its optimizer's first step
    (unless a GradScaler skipped that step: then PyTorch's warning is a false alarm)."""

    MANY_STEPS = 50

    def __init__(self) -> None:
        self.schedulers: dict[int, tuple[str, int, Site | None]] = {}
        self.stepped: set[int] = set()
        self.optimizer_steps: dict[int, int] = {}
        self.scaled: set[int] = set()
        self.epochs_after_step = 0
        self.counted = False  # every optimizer seen has MANY_STEPS steps: no more counting

    def on_scheduler_created(self, doc: Reporter, event: CreatedEvent) -> None:
        # What the verdict needs, not the object: a script's namespace (and with it the
        # scheduler) may be gone when the run ends.
        optimizer = getattr(event.obj, "optimizer", None)
        self.schedulers[id(event.obj)] = (type(event.obj).__name__, id(optimizer), event.site)

    def on_optimizer_created(self, doc: Reporter, event: CreatedEvent) -> None:
        if self.counted:
            self.counted = False
            doc.subscribe(self, "on_step")  # a new optimizer: its steps are counted

    def on_step(self, doc: Reporter, event: StepEvent) -> None:
        key = id(event.optimizer)
        steps = self.optimizer_steps[key] = self.optimizer_steps.get(key, 0) + 1
        if steps >= self.MANY_STEPS and min(self.optimizer_steps.values()) >= self.MANY_STEPS:
            # Counted as far as the verdicts go; an optimizer made before the doctor
            # started and stepped only from now on is told by torch's own mark.
            self.counted = True
            doc.unsubscribe(self, "on_step")

    def on_scaler_step(self, doc: Reporter, event: ScalerStepEvent) -> None:
        self.scaled.add(id(event.optimizer))

    def on_epoch_end(self, doc: Reporter, event: EpochEndEvent) -> None:
        if self.optimizer_steps:
            self.epochs_after_step += 1

    def on_scheduler_step(self, doc: Reporter, event: SchedulerStepEvent) -> None:
        scheduler = event.scheduler
        first = id(scheduler) not in self.stepped
        self.stepped.add(id(scheduler))
        optimizer = getattr(scheduler, "optimizer", None)
        if not first or optimizer is None or id(scheduler) not in self.schedulers:
            return
        if self.optimizer_steps.get(id(optimizer)) or id(optimizer) in self.scaled:
            return
        if getattr(optimizer, "_opt_called", False):
            return  # stepped (torch's mark, set by the scheduler's wrapper of step())
        site = here()  # the user's scheduler.step() call
        if site is None:
            return
        doc.add(
            Finding(
                code="scheduler-not-stepped",
                severity="warning",
                file=site.file,
                line=site.line,
                message="scheduler.step() runs before the optimizer's first step: the first "
                "value of the schedule is skipped",
                why="the schedule runs one step ahead: warmup starts past its first LR and "
                "every change comes one step (or epoch) early",
                fix="call scheduler.step() after optimizer.step() (at the end of the batch "
                "or of the epoch)",
            )
        )

    def on_end(self, doc: Reporter) -> None:
        many = max(self.optimizer_steps.values(), default=0) >= self.MANY_STEPS
        cut = doc.crashed or getattr(doc, "stopped", False)
        if self.epochs_after_step < 2 and (not many or cut):
            # A per-epoch scheduler may not have had its first epoch end yet; without
            # DataLoader epochs, many optimizer steps with no scheduler step are enough.
            return
        for key, (name, optimizer, site) in self.schedulers.items():
            if key in self.stepped or site is None or not self.optimizer_steps.get(optimizer):
                continue
            doc.add(
                Finding(
                    code="scheduler-not-stepped",
                    severity="warning",
                    file=site.file,
                    line=site.line,
                    message=f"{name} is created but never stepped: the learning rate stays at "
                    f"its initial value for all {doc.steps} optimizer steps",
                    why="no warmup, no decay: the schedule you configured is not applied",
                    fix="call scheduler.step() after optimizer.step() (per batch for "
                    "OneCycleLR / warmup schedules, per epoch for StepLR-style ones)",
                )
            )
