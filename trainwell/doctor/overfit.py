"""``trainwell doctor --overfit``: the overfit-one-batch check."""

from __future__ import annotations

from typing import Any

from trainwell.doctor.events import BackwardEvent, Reporter
from trainwell.doctor.probes.loss_not_decreasing import LossCurve


class OverfitCheck:
    """``trainwell doctor --overfit``: the first batch of the training DataLoader is fed
    again in place of every later batch from that loader; the loss of the training
    backward should then fall to near zero. Not a probe that reports a finding: it gives
    a verdict (:meth:`verdict`), with the same rule and words as the engine's
    ``doctor.overfit_batch`` (:class:`trainwell.engine.overfit.OverfitResult`)."""

    def __init__(self) -> None:
        self.dataset: Any = None
        self.batch: Any = None
        self.curve = LossCurve()

    def swap(self, it: Any, batch: Any) -> Any:
        """The batch the script gets: the first one, again, for the training loader."""
        if self.dataset is None:
            self.dataset, self.batch = it._dataset, batch
            return batch
        return self.batch if it._dataset is self.dataset else batch

    def on_backward(self, doc: Reporter, event: BackwardEvent) -> None:
        if event.tensor.requires_grad:
            self.curve.add(event.tensor)

    def verdict(self) -> dict[str, Any]:
        from trainwell.engine.overfit import OverfitResult

        losses = self.curve.resolve()
        if self.dataset is None or len(losses) < 2:
            return {"passed": None, "steps": len(losses),
                    "message": "overfit check: no verdict: it needs the script to draw its "
                    "training batches from a torch DataLoader and call backward() at least "
                    "twice"}  # fmt: skip
        result = OverfitResult(initial_loss=losses[0], final_loss=losses[-1], steps=len(losses))
        return {**result.to_dict(), "message": result.verdict()}
