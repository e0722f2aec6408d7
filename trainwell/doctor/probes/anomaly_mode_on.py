"""The ``anomaly-mode-on`` probe."""

from __future__ import annotations

import torch

from trainwell.doctor.codes import severity
from trainwell.doctor.events import BackwardEvent, CallEvent, Reporter
from trainwell.doctor.findings import Finding
from trainwell.doctor.sites import Site

CODE = "anomaly-mode-on"


class AnomalyModeOnProbe:
    """``anomaly-mode-on``: autograd's anomaly detection is on for the training run,
    not for a debugging step. Counted at the backwards: ``STREAK`` backwards in a row
    under it, or the mode still on when the run ends after ``AT_END`` backwards under
    it. Around one step or two (``with detect_anomaly(): loss.backward()`` once, to
    find a NaN) it is what the mode is for, and not reported.

    Costs nothing while the mode is off: the probe hears backwards only after a call
    switched it on (or when it was on at the first backward).
    """

    STREAK = 10
    AT_END = 3

    def __init__(self) -> None:
        self.site: Site | None = None  # where it was switched on last
        self.run = 0  # backwards in a row under anomaly mode
        self.done = False
        self.listening = True  # to on_backward (until the first backward without the mode)

    def on_call(self, doc: Reporter, event: CallEvent) -> None:
        if event.name != "set_anomaly_enabled" or self.done:
            return
        enabled = event.args[0] if event.args else event.kwargs.get("enabled", False)
        # Switching it off does not end a run of backwards: `with detect_anomaly():`
        # around each step's backward costs as much as leaving it on; a backward
        # without it does.
        if enabled:
            self.site = event.site
            if not self.listening:
                self.listening = True
                doc.subscribe(self, "on_backward")

    def on_backward(self, doc: Reporter, event: BackwardEvent) -> None:
        if not torch.is_anomaly_enabled():
            self.run, self.listening = 0, False
            doc.unsubscribe(self, "on_backward")
            return
        self.run += 1
        if self.site is None and self.run == 1:
            # On before the doctor watched: the first backward under it stands in.
            self.site = event.site
        if self.run >= self.STREAK:
            self._report(doc, event)

    def on_end(self, doc: Reporter) -> None:
        if not self.done and torch.is_anomaly_enabled() and self.run >= self.AT_END:
            self._report(doc, None)

    def _report(self, doc: Reporter, event: BackwardEvent | None) -> None:
        self.done = True
        doc.unsubscribe(self, "on_backward", "on_call")
        site = self.site or (event.site if event is not None else None)
        if site is None:
            return
        doc.add(
            Finding(
                code=CODE,
                severity=severity(CODE),
                file=site.file,
                line=site.line,
                message=f"autograd's anomaly detection is on for the training run ({self.run} "
                "backwards in a row under it so far)",
                why="anomaly mode records a Python traceback for every operation of every "
                "forward and checks every gradient for NaN in the backward: steps run "
                "several times slower; it is a debugging tool",
                fix="remove torch.autograd.set_detect_anomaly(True) (or the detect_anomaly() "
                "block) from the training run; to find a NaN, wrap a single step in "
                "`with torch.autograd.detect_anomaly():` once, or run `trainwell doctor`, "
                "which names the first non-finite operation without it",
                evidence={"backwards_under_anomaly_mode": self.run},
            )
        )
