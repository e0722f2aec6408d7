"""The doctor: the dispatcher with its probes (the registry's, unless given), as the
engine and ``trainwell doctor`` use it.

The names the rest of the package used to import from here (events, sites) are
re-exported for code written against them.
"""

from __future__ import annotations

from collections.abc import Callable

from trainwell.doctor.dispatch import Dispatcher
from trainwell.doctor.events import (
    EVENTS,
    LOSSES,
    BackwardEvent,
    BatchEvent,
    CreatedEvent,
    ForwardEvent,
    LossEvent,
    Probe,
    ScalerStepEvent,
    ScalerUpdateEvent,
    StepEvent,
    StopTraining,
    UpdateEvent,
)
from trainwell.doctor.findings import Finding
from trainwell.doctor.registry import default_probes
from trainwell.doctor.sites import Site, here, is_user_file, user_frame


class Doctor(Dispatcher):
    """Watches training through global hooks and collects findings.

    Example:
        >>> doc = Doctor(probes=[])
        >>> with doc:
        ...     pass
        >>> doc.findings
        []
    """

    def __init__(
        self,
        probes: list[Probe] | None = None,
        max_steps: int | None = None,
        on_finding: Callable[[Finding], None] | None = None,
    ) -> None:
        super().__init__(
            probes=default_probes() if probes is None else probes,
            max_steps=max_steps,
            on_finding=on_finding,
        )

    def report(self) -> str:
        """The findings as text, one block each."""
        from trainwell.doctor.summary import report_text

        return report_text(self)


__all__ = [
    "EVENTS",
    "LOSSES",
    "BackwardEvent",
    "BatchEvent",
    "CreatedEvent",
    "Doctor",
    "ForwardEvent",
    "LossEvent",
    "Probe",
    "ScalerStepEvent",
    "ScalerUpdateEvent",
    "Site",
    "StepEvent",
    "StopTraining",
    "UpdateEvent",
    "here",
    "is_user_file",
    "user_frame",
]
