"""``trainwell doctor --overfit``: the overfit-one-batch check."""

from __future__ import annotations

import math
from typing import Any

from trainwell.doctor.events import BackwardEvent, Reporter
from trainwell.doctor.probes.loss_not_decreasing import LossCurve


class OverfitCheck:
    """``trainwell doctor --overfit``: the first batch of the training DataLoader is fed
    again in place of every later batch from that loader; the loss of the training
    backward should then fall to near zero. Not a probe that reports a finding: it gives
    a verdict (:meth:`verdict`), with the same rule and words as the engine's
    ``doctor.overfit_batch`` (:class:`trainwell.engine.tools.overfit.OverfitResult`). The
    script decides how many steps run: a loss still falling when it ends gets no
    verdict, and how many steps it needs (:func:`steps_needed`)."""

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
        """PASSED once the loss reached the engine's bound, whatever the steps; FAILED
        when it stopped falling (or falls too slowly to get there within
        ``MAX_STEPS``); else no verdict yet: the loss was still falling when the script
        ended, and the verdict says about how many steps it needs."""
        from trainwell.engine.tools.overfit import OverfitResult

        losses = self.curve.resolve()
        if self.dataset is None or len(losses) < 2:
            return {"passed": None, "steps": len(losses),
                    "message": "overfit check: no verdict: it needs the script to draw its "
                    "training batches from a torch DataLoader and call backward() at least "
                    "twice"}  # fmt: skip
        result = OverfitResult(initial_loss=losses[0], final_loss=losses[-1], steps=len(losses))
        if result.passed:
            return {**result.to_dict(), "message": result.verdict()}
        needed = steps_needed(losses)
        if needed is None:
            return {**result.to_dict(), "message": result.verdict()}
        return {**result.to_dict(), "passed": None, "steps_needed": needed,
                "message": f"overfit check: no verdict — loss {result.initial_loss:.4g} -> "
                f"{result.final_loss:.4g} in {result.steps} steps, still falling: at this "
                f"rate it needs about {needed} steps; run the script longer (more epochs "
                "or steps) under --overfit"}  # fmt: skip


# A batch memorized within this many steps passes; one that would take longer at the
# rate its loss falls is not being fit (five times the engine's 200-step check).
MAX_STEPS = 1000
MIN_STEPS = 20  # fewer: too few to tell a flat loss from a slow start


def steps_needed(losses: list[float]) -> int | None:
    """Steps the loss needs in all to reach the pass bound, at the rate it fell over its
    last part; ``None`` when that is a verdict already (FAILED): it rose or stayed flat
    (with at least ``MIN_STEPS`` seen) or would take more than ``MAX_STEPS``.

    Example:
        >>> steps_needed([2.3 * 0.95 ** i for i in range(58)])  # still falling
        60
        >>> steps_needed([2.3] * 60) is None  # flat: FAILED
        True
        >>> steps_needed([2.3, 2.2, 2.1])  # too few to tell
        20
    """
    from trainwell.engine.tools.overfit import PASS_LOSS, PASS_RATIO

    n = len(losses)
    if n < 4:
        return MIN_STEPS
    k = max(2, n // 5)
    before, last = sum(losses[-2 * k : -k]) / k, sum(losses[-k:]) / k
    if not (math.isfinite(before) and math.isfinite(last)) or last <= 0:
        return None
    target = max(PASS_LOSS, PASS_RATIO * losses[0])
    rate = last / before  # per k steps
    if rate >= 0.995:  # flat or rising
        return MIN_STEPS if n < MIN_STEPS else None
    more = math.log(target / last) / math.log(rate) * k
    total = n + max(1, math.ceil(more - k / 2))  # (the last part's mean sits k/2 back)
    if total > MAX_STEPS:
        return None
    return max(total, MIN_STEPS)
