"""Whether an optimizer steps on fresh gradients: what the ``step-before-backward`` and
``loss-no-gradient`` probes both follow over an optimizer's first steps."""

from __future__ import annotations

from typing import Any

from trainwell.doctor.events import BackwardEvent, StepEvent


class _State:
    __slots__ = ("steps", "off", "backwards_at_step", "zeroed_at", "run")

    def __init__(self) -> None:
        self.steps = 0
        self.run = 0  # steps in a row with the verdict a probe looks for
        self.off = False
        self.backwards_at_step = 0  # the backward count at this optimizer's last step
        self.zeroed_at = -1  # the backward count at this optimizer's last zero_grad


class FreshGradients:
    """Each optimizer's first ``check`` steps, told apart at the step: ``"fresh"`` (some
    parameter holds a non-zero gradient), ``"zero"`` (a backward ran since the last step
    and was not cleared, yet every gradient is exactly zero) or ``"stale"`` (no gradient:
    nothing backwarded since the last step, or a ``zero_grad`` after it).
    ``step(closure)`` and steps under a GradScaler are not told (``None``)."""

    def __init__(self, check: int) -> None:
        self.check = check
        self.state: dict[int, _State] = {}
        self.backwards = 0
        self.backward_site: Any = None  # (pin) of the last backward
        self.scaled: set[int] = set()

    def _state(self, optimizer: Any) -> _State:
        st = self.state.get(id(optimizer))
        if st is None:
            st = self.state[id(optimizer)] = _State()
        return st

    def backward(self, event: BackwardEvent) -> None:
        self.backwards += 1
        self.backward_site = event.pin()

    def zero_grad(self, optimizer: Any) -> None:
        self._state(optimizer).zeroed_at = self.backwards

    def scaler_step(self, optimizer: Any) -> None:
        self.scaled.add(id(optimizer))

    def verdict(self, event: StepEvent) -> str | None:
        """How the optimizer about to step stands (``None``: not judged)."""
        st = self._state(event.optimizer)
        if st.off:
            return None
        if event.closure or id(event.optimizer) in self.scaled:
            self.stop(event.optimizer)
            return None
        grads = [p.grad for g in event.optimizer.param_groups for p in g["params"]
                 if p.grad is not None]  # fmt: skip
        if any(bool(g.any()) for g in grads):
            return "fresh"
        if grads and self.backwards > st.backwards_at_step and st.zeroed_at < self.backwards:
            return "zero"  # a fresh backward, not cleared since, left only zeros
        return "stale"

    def run_of(self, event: StepEvent, bad: str) -> int:
        """The verdict of the optimizer about to step (:meth:`verdict`); when it is
        ``bad``, how many steps in a row have had it, this one included (a fresh step
        starts the count anew), else 0."""
        verdict = self.verdict(event)
        st = self._state(event.optimizer)
        if verdict == "fresh":
            st.run = 0
        elif verdict == bad:
            st.run += 1
        return st.run if verdict == bad else 0

    def stepped(self, event: StepEvent) -> int | None:
        """Count the step; the optimizer's steps so far (``None`` once it is judged)."""
        st = self._state(event.optimizer)
        if st.off:
            return None
        st.steps += 1
        st.backwards_at_step = self.backwards
        if st.steps >= self.check:
            self.stop(event.optimizer)
        return st.steps

    def steps(self, optimizer: Any) -> int:
        return self._state(optimizer).steps

    def stop(self, optimizer: Any) -> None:
        self._state(optimizer).off = True

    def done(self) -> bool:
        """Every optimizer seen is judged."""
        return all(s.off for s in self.state.values())
