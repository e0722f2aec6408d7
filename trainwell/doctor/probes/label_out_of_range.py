"""The ``label-out-of-range`` probe."""

from __future__ import annotations

import torch

from trainwell.doctor.events import CLASSIFICATION_LOSSES, LossEvent, Reporter
from trainwell.doctor.findings import Finding
from trainwell.doctor.head import head_site
from trainwell.doctor.labels import label_origin, labels_out_of_range


class LabelOutOfRangeProbe:
    """``label-out-of-range`` at the classification losses: class targets outside
    ``[0, C)`` (``ignore_index`` aside), binary targets outside ``[0, 1]``.

    The first ``ALWAYS`` calls are looked at (a min and a max of the labels: on a GPU
    reading them makes the host wait, so only then), which catches the bug before CUDA's
    device-side assert; later, a bad label in one batch raises PyTorch's IndexError on
    the CPU, which the crash report explains.
    """

    ALWAYS = 64  # calls looked at

    def __init__(self) -> None:
        self.calls = 0

    def on_loss(self, doc: Reporter, event: LossEvent) -> None:
        if event.name not in CLASSIFICATION_LOSSES:
            return  # regression losses: the loss-broadcast probe looks at those
        if not isinstance(event.input, torch.Tensor) or not isinstance(event.target, torch.Tensor):
            return
        self.calls += 1
        if self.calls > self.ALWAYS:
            # The wiring is the same every step; a bad label in a later batch raises
            # PyTorch's IndexError on the CPU, which the crash report explains.
            doc.unsubscribe(self, "on_loss")
            return
        bad = labels_out_of_range(event)
        if bad is None:
            return
        # 1-based labels are fixed where they are made; a head too small where its size
        # is set; other ranges at the loss (the loss's kind). (Before .site, which lets
        # the frames go.)
        made = label_origin(event, doc.last_batch) if bad.one_based else None
        site = event.site
        if site is None:
            return
        related = [{"file": site.file, "line": site.line, "what": "the loss"}]
        if made is None and bad.classes:
            models = [r.module for r in reversed(doc.step_forwards)] + doc.models()
            files = [site.file] + [r.file for r in doc.step_forwards]
            head = head_site(models, bad.classes, files)
            if head is not None:
                made, origin = head
                related += origin
        related = related if made else []
        doc.add(
            Finding(
                code="label-out-of-range",
                severity="error",
                file=(made or site).file,
                line=(made or site).line,
                related=related,
                message=f"{event.name} targets range over [{bad.lo:g}, {bad.hi:g}] but must "
                f"lie in {bad.expected}",
                why="on a GPU this is the cryptic 'device-side assert triggered'; on the "
                "CPU an IndexError; with binary losses it trains silently on nonsense",
                fix=bad.hint,
                evidence={"min": bad.lo, "max": bad.hi, "expected": bad.expected},
            )
        )
