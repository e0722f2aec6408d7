"""The ``loss-broadcast`` probe: a regression loss given ``(N, 1)`` outputs and ``(N,)``
targets (or the reverse), which PyTorch broadcasts to ``(N, N)`` with only a warning."""

from __future__ import annotations

import torch

from trainwell.doctor.events import LossEvent, Reporter
from trainwell.doctor.findings import Finding


class LossBroadcastProbe:
    """Output and target shapes that a regression loss broadcasts to a matrix.

    Only shapes are compared (no value is read, nothing waits for the device); the
    wiring is the same every step, so the first ``CALLS`` calls say it all.
    """

    CALLS = 64

    def __init__(self) -> None:
        self.calls = 0

    def on_loss(self, doc: Reporter, event: LossEvent) -> None:
        self.calls += 1
        if self.calls > self.CALLS:
            doc.unsubscribe(self, "on_loss")
            return
        out, target = event.input, event.target
        if not isinstance(out, torch.Tensor) or not isinstance(target, torch.Tensor):
            return
        fix = _fix(tuple(out.shape), tuple(target.shape))
        if fix is None:
            return
        site = event.site
        if site is None:
            return
        doc.add(
            Finding(
                code="loss-broadcast",
                severity="error",
                file=site.file,
                line=site.line,
                message=f"{event.name} compares outputs of shape {tuple(out.shape)} with "
                f"targets of shape {tuple(target.shape)}: they broadcast to "
                f"{tuple(torch.broadcast_shapes(out.shape, target.shape))}, every output "
                "against every target",
                why="the loss is minimized by predicting the mean target for every sample: "
                "the model trains to something useless, with only a UserWarning",
                fix=fix,
                evidence={"input_shape": list(out.shape), "target_shape": list(target.shape)},
            )
        )


def _fix(out: tuple[int, ...], target: tuple[int, ...]) -> str | None:
    """The fix when ``out`` and ``target`` differ only by a trailing size-1 axis that
    makes them broadcast into a bigger tensor; ``None`` otherwise.

    Example:
        >>> _fix((8, 1), (8,))
        'squeeze the output: loss(output.squeeze(-1), target) (or target.unsqueeze(-1))'
        >>> _fix((8,), (8,)) is None, _fix((1, 1), (1,)) is None
        (True, True)
    """
    if out == target or not out or not target or out[0] <= 1:
        return None
    if out == (*target, 1):
        return "squeeze the output: loss(output.squeeze(-1), target) (or target.unsqueeze(-1))"
    if target == (*out, 1):
        return "squeeze the target: loss(output, target.squeeze(-1))"
    return None
