"""What a run is built from before its run directory opens: the model, the data, the
stepper, the schedule, the checkpointer... (:class:`Assembly`), and the profiler's shape.

``fit`` builds an :class:`Assembly` first, because a resume restores into it and a dry run
reports on it before anything is written; the :class:`~trainwell.engine.loop.trainer.Trainer`
is then built whole from it and what the run directory brings (the directory, the progress
display, the loggers, the profiler), with no field left to fill in later.

Example (the real one is ``trainwell.engine.fit``'s ``_assemble`` and ``_train``)::

    plan = Assembly(cfg=cfg, place=place, model=model, ...)
    restore(plan.checkpointer, path, state)      # a resume, before the run dir is ours
    trainer = Trainer.start(plan, run=run, progress=progress, loggers=loggers)
    trainer.train(resumed=True)
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

from torch import nn
from torch.utils.data import DataLoader

from trainwell.config import Config
from trainwell.engine.checkpointing.checkpointer import Checkpointer
from trainwell.engine.distributed.placement import Placement, any_process
from trainwell.engine.loading.loaders import TrainData
from trainwell.engine.loop.evaluate import Evaluator
from trainwell.engine.state.callbacks import Callbacks
from trainwell.engine.state.early_stopping import EarlyStopping
from trainwell.engine.state.loop_state import LoopState
from trainwell.engine.state.signals import GracefulStop, Interrupted
from trainwell.engine.step.anatomy import StepClock
from trainwell.engine.step.stepper import Stepper


@dataclass(kw_only=True)
class Assembly:
    """The run's collaborators, built and wired before anything is written.

    ``clock`` is the step anatomy the ``stepper`` marks its phases on (the same object:
    given to both when they are built). ``findings`` returns the doctor's findings so far
    (the memory monitor names a holder among them).
    """

    cfg: Config
    place: Placement
    model: nn.Module
    data: TrainData
    stepper: Stepper
    clock: StepClock
    scheduler: Any
    stopper: EarlyStopping
    monitor: str
    loop: LoopState
    checkpointer: Checkpointer
    evaluator: Evaluator
    val_loader: DataLoader | None
    total_steps: int
    check_labels: Callable[[Any], None] | None = None
    stop: GracefulStop = field(default_factory=GracefulStop)
    callbacks: Callbacks = field(default_factory=Callbacks)
    findings: Callable[[], list] = list

    def __post_init__(self) -> None:
        # Objects the collaborators must share, checked once: a stepper with its own clock
        # or skip counter would time nothing / leave fp16's skipped steps out of checkpoints.
        wiring = {
            "stepper.clock is clock": self.stepper.clock is self.clock,
            "checkpointer.loop is loop": self.checkpointer.loop is self.loop,
            "checkpointer.callbacks is callbacks": self.checkpointer.callbacks is self.callbacks,
            "stepper.amp_skipped is loop.amp_skipped (fp16)": (
                self.stepper.precision.scaler is None
                or self.stepper.amp_skipped is self.loop.amp_skipped
            ),
        }
        wrong = [rule for rule, ok in wiring.items() if not ok]
        if wrong:
            raise ValueError(f"Assembly: its parts are not wired together: {', '.join(wrong)}")

    def stop_if_requested(self) -> None:
        """Stop at this boundary if a signal came, on every rank at the same point (a rank
        that raises alone would leave the others waiting in a collective)."""
        if any_process(self.stop.requested, self.place):
            raise Interrupted(self.stop.signum or signal.SIGTERM)

    def parts(self) -> dict[str, Any]:
        """The Assembly's own fields by name (a Trainer's too, without what it adds), to
        build a Trainer from; shallow: the same objects."""
        return {f.name: getattr(self, f.name) for f in fields(Assembly)}


class StepsProfiler(Protocol):
    """``train.profile``'s profiler as the loop drives it (``tools/profiling.py``)."""

    done: bool

    def step(self) -> None: ...

    def close(self) -> None: ...

    def summary_lines(self) -> list[str]: ...
