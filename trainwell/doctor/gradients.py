"""Whether an optimizer steps on fresh gradients: what the ``step-before-backward`` and
``loss-no-gradient`` probes both follow over an optimizer's first steps.

:class:`FreshGradients` is the run's record (one per run, from the dispatcher's
:class:`~trainwell.doctor.trackers.Trackers`), fed by each probe that follows it, and
idempotent: the second probe to hear a backward or a step changes nothing.
:class:`GradientVerdicts` is one probe's view of it: which optimizers that probe has
judged, and its run of bad steps.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from trainwell.doctor.events import BackwardEvent, StepEvent
from trainwell.doctor.sites import Site
from trainwell.doctor.trackers import Trackers


class _Counts:
    __slots__ = ("steps", "last_step", "backwards_at_step", "zeroed_at")

    def __init__(self) -> None:
        self.steps = 0
        self.last_step = -1  # the dispatcher's step count at the last step counted
        self.backwards_at_step = 0  # the backward index at this optimizer's last step
        self.zeroed_at = -1  # the backward index at this optimizer's last zero_grad


class FreshGradients:
    """The backwards, ``zero_grad`` calls and steps of a run's optimizers, as the
    fresh-gradient verdicts need them; the optimizers stepped under a GradScaler."""

    def __init__(self) -> None:
        self.backwards = 0  # the index of the last backward heard
        self.backward_site: Callable[[], Site | None] | None = None  # (pin) of the last one
        self.scaled: set[int] = set()
        self.counts: dict[int, _Counts] = {}  # id(optimizer) -> what it did

    def of(self, optimizer: torch.optim.Optimizer) -> _Counts:
        counts = self.counts.get(id(optimizer))
        if counts is None:
            counts = self.counts[id(optimizer)] = _Counts()
        return counts

    def backward(self, event: BackwardEvent) -> None:
        if event.index != self.backwards:  # the first probe to hear it
            self.backwards = event.index
            self.backward_site = event.pin()

    def zero_grad(self, optimizer: torch.optim.Optimizer) -> None:
        self.of(optimizer).zeroed_at = self.backwards

    def scaler_step(self, optimizer: torch.optim.Optimizer) -> None:
        self.scaled.add(id(optimizer))

    def stepped(self, event: StepEvent) -> int:
        """Count the step (once, whichever probe tells it first); the optimizer's
        steps so far."""
        counts = self.of(event.optimizer)
        if counts.last_step != event.step:
            counts.last_step = event.step
            counts.steps += 1
            counts.backwards_at_step = self.backwards
        return counts.steps


class GradientVerdicts:
    """One probe's verdicts over each optimizer's first ``check`` steps, told apart at
    the step: ``"fresh"`` (some parameter holds a non-zero gradient), ``"zero"`` (a
    backward ran since the last step and was not cleared, yet every gradient is exactly
    zero) or ``"stale"`` (no gradient: nothing backwarded since the last step, or a
    ``zero_grad`` after it). ``step(closure)`` and steps under a GradScaler are not told
    (``None``).

    Example:
        >>> verdicts = GradientVerdicts(Trackers(), check=12)
        >>> verdicts.done()
        True
    """

    def __init__(self, trackers: Trackers, check: int) -> None:
        self.shared = trackers.get(FreshGradients)
        self.check = check
        self.off: set[int] = set()  # optimizers judged
        self.runs: dict[int, int] = {}  # id(optimizer) -> steps in a row with the verdict

    @property
    def backward_site(self) -> Callable[[], Site | None] | None:
        return self.shared.backward_site

    def backward(self, event: BackwardEvent) -> None:
        self.shared.backward(event)

    def zero_grad(self, optimizer: torch.optim.Optimizer) -> None:
        self.shared.zero_grad(optimizer)

    def scaler_step(self, optimizer: torch.optim.Optimizer) -> None:
        self.shared.scaler_step(optimizer)

    def verdict(self, event: StepEvent) -> str | None:
        """How the optimizer about to step stands (``None``: not judged)."""
        optimizer, shared = event.optimizer, self.shared
        counts = shared.of(optimizer)
        if id(optimizer) in self.off:
            return None
        if event.closure or id(optimizer) in shared.scaled:
            self.stop(optimizer)
            return None
        grads = [p.grad for g in optimizer.param_groups for p in g["params"]
                 if p.grad is not None]  # fmt: skip
        if any(bool(g.any()) for g in grads):
            return "fresh"
        backwards = shared.backwards
        if grads and backwards > counts.backwards_at_step and counts.zeroed_at < backwards:
            return "zero"  # a fresh backward, not cleared since, left only zeros
        return "stale"

    def run_of(self, event: StepEvent, bad: str) -> int:
        """The verdict of the optimizer about to step (:meth:`verdict`); when it is
        ``bad``, how many steps in a row have had it, this one included (a fresh step
        starts the count anew), else 0."""
        verdict = self.verdict(event)
        key = id(event.optimizer)
        if verdict == "fresh":
            self.runs[key] = 0
        elif verdict == bad:
            self.runs[key] = self.runs.get(key, 0) + 1
        return self.runs.get(key, 0) if verdict == bad else 0

    def stepped(self, event: StepEvent) -> int | None:
        """Count the step; the optimizer's steps so far (``None`` once it is judged)."""
        if id(event.optimizer) in self.off:
            return None
        steps = self.shared.stepped(event)
        if steps >= self.check:
            self.stop(event.optimizer)
        return steps

    def steps(self, optimizer: torch.optim.Optimizer) -> int:
        return self.shared.of(optimizer).steps

    def stop(self, optimizer: torch.optim.Optimizer) -> None:
        self.off.add(id(optimizer))

    def done(self) -> bool:
        """Every optimizer seen is judged."""
        return all(key in self.off for key in self.shared.counts)
