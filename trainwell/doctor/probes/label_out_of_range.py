"""The ``label-out-of-range`` probe."""

from __future__ import annotations

import math

import torch

from trainwell.doctor.events import CLASSIFICATION_LOSSES, LossEvent, Reporter
from trainwell.doctor.findings import Finding


class LossInputsProbe:
    """``label-out-of-range`` and ``loss-at-init`` at the classification losses.

    The first ``ALWAYS`` calls are looked at (a min and a max of the labels: on a GPU
    reading them makes the host wait, so only then), which catches the bug before CUDA's
    device-side assert; later, a bad label in one batch raises PyTorch's IndexError on
    the CPU, which the crash report explains. Probabilities are recognized by the
        """

    ALWAYS = 64  # calls looked at

    def __init__(self) -> None:
        self.calls = 0
        self.first_done = False

    def on_loss(self, doc: Reporter, event: LossEvent) -> None:
        input, target = event.input, event.target
        if event.name not in CLASSIFICATION_LOSSES:
            return  # regression losses: the loss-broadcast probe looks at those
        if not isinstance(input, torch.Tensor) or not isinstance(target, torch.Tensor):
            return
        self.calls += 1
        if self.calls > self.ALWAYS:
            # The wiring is the same every step; a bad label in a later batch raises
            # PyTorch's IndexError on the CPU, which the crash report explains.
            doc.unsubscribe(self, "on_loss")
            return
        # The first loss is worth computing only with labels in range (else it raises).
        labels_ok = self._labels_ok(doc, event)
        if labels_ok and not self.first_done and input.requires_grad and doc.steps == 0:
            self.first_done = True
            self._first_loss(doc, event)

    def _labels_ok(self, doc: Reporter, event: LossEvent) -> bool:
        """False when the targets are out of range (and reported), else True."""
        target = event.target
        if event.name in ("cross_entropy", "nll_loss"):
            return self._class_labels(doc, event)
        if target.is_floating_point() and target.numel():
            lo, hi = torch.aminmax(target.detach())
            if lo < 0 or hi > 1:
                hint = ("binary targets must be probabilities in [0, 1]; for class indices "
                        "use CrossEntropyLoss")  # fmt: skip
                self._report_labels(doc, event, float(lo), float(hi), "[0, 1]", hint)
                return False
        return True

    def _class_labels(self, doc: Reporter, event: LossEvent) -> bool:
        input, target = event.input, event.target
        if target.is_floating_point() or not target.numel():
            return True  # class probabilities (soft targets)
        classes = input.shape[1] if input.dim() >= 2 else input.shape[0]
        if input.dim() >= 3 and tuple(target.shape) != (input.shape[0], *input.shape[2:]):
            return True  # a shape bug ((N, T, C) logits not transposed): PyTorch names it
        target = target.detach()
        lo, hi = torch.aminmax(target)
        if lo >= 0 and hi < classes:
            return True  # the common case: one reduction, no mask
        ignore = event.kwargs.get("ignore_index", -100)
        valid = target[target != ignore]
        if not valid.numel():
            return True
        lo, hi = (int(v) for v in torch.aminmax(valid))
        if lo >= 0 and hi < classes:
            return True
        if lo >= 1 and hi == classes:
            hint = "the labels look 1-based: use y - 1"
        elif hi >= classes:
            hint = (f"the model has {classes} outputs: make it {hi + 1} (the number of "
                    "classes), or remap the labels to 0..C-1")  # fmt: skip
        else:
            hint = "negative labels: map them to 0..C-1 or to ignore_index"
        self._report_labels(doc, event, lo, hi, f"[0, {classes})", hint)
        return False

    def _report_labels(
        self, doc: Reporter, event: LossEvent, lo: float, hi: float, expected: str, hint: str
    ) -> None:
        site = event.site
        if site is None:
            return
        doc.add(
            Finding(
                code="label-out-of-range",
                severity="error",
                file=site.file,
                line=site.line,
                message=f"{event.name} targets range over [{lo:g}, {hi:g}] but must lie in "
                f"{expected}",
                why="on a GPU this is the cryptic 'device-side assert triggered'; on the "
                "CPU an IndexError; with binary losses it trains silently on nonsense",
                fix=hint,
                evidence={"min": lo, "max": hi, "expected": expected},
            )
        )

    def _first_loss(self, doc: Reporter, event: LossEvent) -> None:
        """The first training loss of a fresh classifier should be about ln C."""
        input, target = event.input.detach(), event.target.detach()
        kwargs = event.kwargs
        if kwargs.get("weight") is not None or kwargs.get("label_smoothing", 0.0):
            return
        if input.device != target.device:
            return  # the loss call itself will fail: device-mismatch explains it
        if input.dim() >= 3 and tuple(target.shape) != (input.shape[0], *input.shape[2:]):
            return  # a shape bug: the loss call will name it
        if event.name == "cross_entropy" and input.dim() >= 2 and input.shape[1] > 1:
            classes = input.shape[1]
            if target.is_floating_point():
                return
            ignore = kwargs.get("ignore_index", -100)
            with doc.muted():
                value = torch.nn.functional.cross_entropy(input.float(), target,
                                                          ignore_index=ignore)  # fmt: skip
                # With the targets of other samples: a margin loss (ArcFace, CosFace)
                # lowers the true class's logit by design; then only the true classes'
                # loss is high, not every class's.
                others = torch.nn.functional.cross_entropy(
                    input.float(), target.roll(1, 0), ignore_index=ignore
                )
            if target.numel() > 1 and float(others) <= max(3 * math.log(classes),
                                                           math.log(classes) + 2):  # fmt: skip
                return
        elif event.name == "binary_cross_entropy_with_logits" and target.is_floating_point():
            classes = 2
            with doc.muted():
                value = torch.nn.functional.binary_cross_entropy_with_logits(
                    input.float(), target.float()
                )
        else:
            return
        value = float(value)
        expected = math.log(classes)
        if not math.isfinite(value) or value <= max(3 * expected, expected + 2):
            return
        site = event.site
        if site is None:
            return
        std = float(input.float().std()) if input.numel() > 1 else 0.0
        doc.add(
            Finding(
                code="loss-at-init",
                severity="warning",
                file=site.file,
                line=site.line,
                message=f"the first loss is {value:.3g}; a fresh {classes}-class classifier "
                f"gives about ln({classes}) = {expected:.3g} (its logits have std {std:.3g})",
                why="an untrained model should be unsure; a much higher loss means "
                "confidently wrong logits from the start: unnormalized inputs, an init "
                "scaled too large, or a bug in the loss; the first steps go into undoing it",
                fix="normalize the inputs (e.g. x / 255, or subtract the mean and divide by "
                "the std), use the default init (or scale the last layer's weights down), "
                "and check what is fed to the loss",
                evidence={"first_loss": value, "expected": expected, "logit_std": std},
            )
        )
