"""A training loss that became NaN or Inf and stayed so: the run stops at the epoch's end.

A loss that is not finite over a whole epoch and still at its last log window will not
come back (the weights hold NaN by then); going on would only burn the time left.
"""

from __future__ import annotations

import math

from trainwell.errors import Diverged


def stop_if_diverged(epoch_loss: float | None, last_window_loss: float | None, step: int) -> None:
    """Raise :class:`~trainwell.errors.Diverged` where the epoch's mean loss and the last
    log window's (the epoch's, without a window) are both NaN/Inf.

    Example:
        >>> stop_if_diverged(float("nan"), 0.5, 40)  # finite again at the end: goes on
        >>> try:
        ...     stop_if_diverged(float("nan"), float("nan"), 40)
        ... except Diverged as exc:
        ...     print(str(exc)[:62])
        the training loss became nan and stayed there (diverged by ste
    """
    if epoch_loss is None:
        return
    last = epoch_loss if last_window_loss is None else last_window_loss
    if math.isfinite(epoch_loss) or math.isfinite(last):
        return
    raise Diverged(
        f"the training loss became {epoch_loss} and stayed there (diverged by step "
        f"{step}); lower optim.lr, raise sched.warmup_steps, or keep "
        "train.grad_clip on; `trainwell lr-find` suggests an lr"
    )
