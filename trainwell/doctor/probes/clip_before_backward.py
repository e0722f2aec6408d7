"""The ``clip-before-backward`` probe."""

from __future__ import annotations

from typing import Any

from trainwell.doctor.codes import severity
from trainwell.doctor.events import BackwardEvent, CallEvent, Reporter, StepEvent, ZeroGradEvent
from trainwell.doctor.findings import Finding

CODE = "clip-before-backward"


class ClipBeforeBackwardProbe:
    """``clip-before-backward``: ``clip_grad_norm_`` / ``clip_grad_value_`` called when no
    backward has run since the last ``step()`` or ``zero_grad()`` of the optimizer that
    holds the clipped parameters: before this step's backward (it clips nothing, or the
    last step's gradients, which the backward then adds to) or after the step (too
    late). The correct orders (backward, ``scaler.unscale_``, clip, step; accumulation,
    clipping once before the step; a closure) always have a backward in between.

    Starts listening to backwards and steps at the first clip (which is not judged:
    what came before it is not known), judges ``CHECK`` clips, reports a clip site
    stale ``STREAK`` times in a row, then costs nothing.
    """

    CHECK = 16
    STREAK = 3
    _TRACKED = ("on_backward", "on_zero_grad", "on_step")

    def __init__(self) -> None:
        self.active = False  # listening to backwards and steps (from the first clip on)
        self.backwards = 0
        self.reset_at: dict[int, int] = {}  # id(optimizer) -> backwards at its step/zero_grad
        self.last_reset = -1  # backwards at the last step/zero_grad of any optimizer
        self.owner: dict[int, int] = {}  # id(parameter) -> id(its optimizer)
        self.known: set[int] = set()  # optimizers whose parameters are in ``owner``
        self.clips = 0
        self.runs: dict[Any, int] = {}  # clip site key -> stale clips in a row
        self.back_site: Any = None
        self.step_site: Any = None
        self.last_kind: dict[int | None, str] = {}  # id(optimizer) -> "step" / "zero_grad"

    def on_backward(self, doc: Reporter, event: BackwardEvent) -> None:
        if not self.active:
            doc.unsubscribe(self, *self._TRACKED)
            return
        self.backwards += 1
        self.back_site = event.pin()

    def on_zero_grad(self, doc: Reporter, event: ZeroGradEvent) -> None:
        if not self.active:
            doc.unsubscribe(self, *self._TRACKED)
            return
        self._reset(event.optimizer, "zero_grad")

    def on_step(self, doc: Reporter, event: StepEvent) -> None:
        if not self.active:
            doc.unsubscribe(self, *self._TRACKED)
            return
        self.step_site = event.pin()
        self._reset(event.optimizer, "step")

    def _reset(self, optimizer: Any, kind: str) -> None:
        key = id(optimizer)
        self.reset_at[key] = self.last_reset = self.backwards
        self.last_kind[key] = self.last_kind[None] = kind
        if key not in self.known:
            self.known.add(key)
            for group in optimizer.param_groups:
                for p in group["params"]:
                    self.owner.setdefault(id(p), key)

    def on_clip(self, doc: Reporter, event: CallEvent) -> None:
        if not self.active:
            self.active = True
            doc.subscribe(self, *self._TRACKED)
            return
        tensors = event.args[0]
        opt: int | None = next((self.owner[id(t)] for t in tensors if id(t) in self.owner), None)
        reset = self.reset_at.get(opt, -1) if opt is not None else self.last_reset
        if reset < 0:
            return  # nothing known of this optimizer yet: not judged
        self.clips += 1
        key = event.key
        stale = self.backwards == reset
        self.runs[key] = self.runs.get(key, 0) + 1 if stale else 0
        if self.runs[key] >= self.STREAK:
            self._report(doc, event, self.last_kind.get(opt, "zero_grad"))
        elif self.clips >= self.CHECK:
            self._stop(doc)

    def _stop(self, doc: Reporter) -> None:
        self.active = False
        doc.unsubscribe(self, "on_clip", *self._TRACKED)

    def _report(self, doc: Reporter, event: CallEvent, after: str) -> None:
        self._stop(doc)
        site = event.site
        if site is None:
            return
        late = after == "step"
        pinned = self.step_site if late else self.back_site
        other = pinned() if pinned is not None else None
        what = "optimizer.step()" if late else "backward"
        related = [{"file": other.file, "line": other.line, "what": what}] if other else []
        when = ("after this step's optimizer.step(): the step already applied the "
                "unclipped gradients" if late else "before this step's loss.backward(): "
                "the gradients it clips are cleared (or the last step's)")  # fmt: skip
        doc.add(
            Finding(
                code=CODE,
                severity=severity(CODE),
                file=site.file,
                line=site.line,
                message=f"{event.name} runs {when}",
                why="clipping acts on the gradients in .grad at the moment it runs: before "
                "the backward they are cleared (it clips nothing) or last step's, and the "
                "step then applies unclipped gradients",
                fix="order each step as zero_grad(), forward, loss.backward(), "
                "[scaler.unscale_(optimizer)], clip_grad_norm_(...), optimizer.step()",
                related=related,
                evidence={"stale_clips_in_a_row": self.runs.get(event.key, 0)},
            )
        )
