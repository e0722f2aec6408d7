"""The ``retain-graph`` probe."""

from __future__ import annotations

from trainwell.doctor.events import BackwardEvent, Reporter
from trainwell.doctor.findings import Finding
from trainwell.doctor.sites import Site


class RetainGraphProbe:
    """``backward(retain_graph=True)`` as the last backward of step after step.

    Keeping the graph is needed when a second backward goes through it in the same step
    (a GAN, two losses); when no backward follows before the optimizer step, the graph
    is kept for nothing, every step. A step is judged at the first backward after it
    (or at the end): the last backward before it is known then, and the step itself
    needs no call.
    """

    STEPS = 3

    def __init__(self) -> None:
        self.site: Site | None = None  # of the last backward, if it retained
        self.steps = 0  # the optimizer steps at the last backward
        self.streak = 0

    def on_backward(self, doc: Reporter, event: BackwardEvent) -> None:
        if doc.steps != self.steps:
            if self.site is None and not self.streak:
                self.steps = doc.steps  # the common case: nothing retained, no streak
            else:
                self._stepped(doc, doc.steps - self.steps)
        # The place is read now, while the user's frame is still at the backward call.
        self.site = event.site if event.retain_graph else None

    def on_end(self, doc: Reporter) -> None:
        if doc.steps != self.steps:
            self._stepped(doc, doc.steps - self.steps)

    def _stepped(self, doc: Reporter, steps: int) -> None:
        """``steps`` optimizer steps came after the last backward."""
        site, self.site, self.steps = self.site, None, doc.steps
        if site is None or steps > 1:  # a step after a plain backward, or without one
            self.streak = 0
            return
        self.streak += 1
        if self.streak >= self.STEPS:
            doc.add(
                Finding(
                    code="retain-graph",
                    severity="warning",
                    file=site.file,
                    line=site.line,
                    message="backward(retain_graph=True) every step, with no later backward "
                    "through that graph: each step's graph is kept alive for nothing",
                    why="the activations of the whole step stay in memory until the tensor "
                    "is freed, and longer if it is stored",
                    fix="drop retain_graph=True (keep it only on the first of two backward "
                    "calls that share a graph)",
                    evidence={"steps_observed": self.streak},
                )
            )
