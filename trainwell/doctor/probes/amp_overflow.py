"""The ``amp-overflow`` probe."""

from __future__ import annotations

import math
from typing import Any

import torch

from trainwell.doctor.events import (
    Reporter,
    ScalerStepEvent,
    ScalerUpdateEvent,
)
from trainwell.doctor.findings import Finding
from trainwell.doctor.sites import Site


class AmpOverflowProbe:
    """``amp-overflow``: a GradScaler skipping a large share of its steps after the scale
    has settled, or a scale collapsing toward zero (gradients overflow fp16 even
    unscaled). Skips while the scale settles at the start are how GradScaler works."""

    SETTLE = 20  # the first updates find the scale: skips there are normal
    WINDOW = 20  # updates judged at least
    SHARE = 0.25  # of the steps after SETTLE skipped
    FLOOR = 1.0  # a scale below this: fp16 overflows even without scaling
    RESOLVE = 16  # GPU: scales read in batches, one host sync per this many steps

    def __init__(self) -> None:
        self.sites: dict[int, Site | None] = {}
        self.pending: list[tuple[Any, torch.Tensor, torch.Tensor]] = []
        self.records: dict[int, ScalerRecord] = {}
        self.reported: set[int] = set()

    def on_scaler_step(self, doc: Reporter, event: ScalerStepEvent) -> None:
        if id(event.scaler) not in self.sites:
            self.sites[id(event.scaler)] = event.site

    def on_scaler_update(self, doc: Reporter, event: ScalerUpdateEvent) -> None:
        scaler = event.scaler
        if id(scaler) in self.reported:
            return
        self.pending.append((scaler, event.scale_before, scaler._scale.detach().clone()))
        if event.scale_before.device.type == "cpu" or len(self.pending) >= self.RESOLVE:
            self._resolve(doc)

    def on_end(self, doc: Reporter) -> None:
        self._resolve(doc)

    def _resolve(self, doc: Reporter) -> None:
        pending, self.pending = self.pending, []
        if not pending:
            return
        scales = [t.reshape(-1)[0].float() for _, before, after in pending for t in (before, after)]
        try:
            values = torch.stack(scales).cpu().tolist()  # one transfer for the batch
        except RuntimeError:  # scalers on different devices
            values = [float(v) for v in scales]
        for i, (scaler, _, _) in enumerate(pending):
            record = self.records.setdefault(id(scaler), ScalerRecord())
            record.add(values[2 * i], values[2 * i + 1])
            if id(scaler) not in self.reported and record.overflowing():
                self.reported.add(id(scaler))
                self._report(doc, scaler, record)

    def _report(self, doc: Reporter, scaler: Any, record: ScalerRecord) -> None:
        site = self.sites.get(id(scaler))
        if site is None:
            return
        doc.add(
            Finding(
                code="amp-overflow",
                severity="error",
                file=site.file,
                line=site.line,
                message=f"GradScaler skipped {record.skipped} of {record.updates} optimizer "
                f"steps (inf/NaN gradients) and its scale is down to {record.scale:.3g}",
                why="a skipped step does not train: the model learns only on the steps that "
                "fit in fp16, and a collapsing scale means gradients overflow even unscaled",
                fix="lower the learning rate; clip gradients after scaler.unscale_(optimizer); "
                "train in bf16 (same range as fp32, no scaler needed) where the hardware has "
                "it; keep the overflowing layer (softmax, norms, the loss) in fp32 with "
                "torch.autocast(..., enabled=False)",
                evidence={
                    "skipped": record.skipped,
                    "updates": record.updates,
                    "scale": record.scale,
                    "min_scale": record.min_scale,
                },
            )
        )


class ScalerRecord:
    """What the verdict needs of a GradScaler's updates, summed as they come: the
    history itself would grow with the run, and judging it anew each step would cost
    more with every step."""

    def __init__(self) -> None:
        self.updates = 0
        self.skipped = 0  # updates that backed the scale off (inf/NaN gradients)
        self.settled = 0  # updates after the first SETTLE
        self.settled_skipped = 0
        self.scale = math.nan  # after the last update
        self.min_scale = math.inf

    def add(self, before: float, after: float) -> None:
        skipped = after < before
        self.updates += 1
        self.skipped += skipped
        if self.updates > AmpOverflowProbe.SETTLE:
            self.settled += 1
            self.settled_skipped += skipped
        self.scale = after
        self.min_scale = min(self.min_scale, after)

    def overflowing(self) -> bool:
        """The scale below the floor (or NaN), or a share of the settled updates
        skipped, over at least WINDOW of them."""
        rules = AmpOverflowProbe
        if not self.updates:
            return False
        if self.scale < rules.FLOOR or math.isnan(self.scale):
            return True
        if self.settled < rules.WINDOW:
            return False
        return self.settled_skipped / self.settled >= rules.SHARE


def overflowing(history: list[tuple[float, float]]) -> bool:
    """Whether a GradScaler's (scale before, scale after) updates show a problem.

    Example:
        >>> overflowing([(65536.0, 32768.0)] * 3 + [(32768.0, 32768.0)] * 60)
        False
        >>> overflowing([(2.0 ** -k, 2.0 ** -(k + 1)) for k in range(30)])
        True
    """
    record = ScalerRecord()
    for before, after in history:
        record.add(before, after)
    return record.overflowing()
