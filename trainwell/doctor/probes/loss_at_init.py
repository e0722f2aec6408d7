"""The ``loss-at-init`` probe."""

from __future__ import annotations

import math

import torch

from trainwell.doctor.events import CLASSIFICATION_LOSSES, LossEvent, Reporter
from trainwell.doctor.findings import Finding
from trainwell.doctor.labels import labels_out_of_range


class LossAtInitProbe:
    """``loss-at-init``: the first training loss of a fresh classifier, before any
    optimizer step, far above ln C (what a model unsure of every class gives):
    unnormalized inputs, an init scaled too large, or a bug in the loss. Looked for in
    the first ``ALWAYS`` classification-loss calls; labels out of range are the
    ``label-out-of-range`` probe's (the loss would raise on them)."""

    ALWAYS = 64  # calls looked at

    def __init__(self) -> None:
        self.calls = 0

    def on_loss(self, doc: Reporter, event: LossEvent) -> None:
        input, target = event.input, event.target
        if event.name not in CLASSIFICATION_LOSSES:
            return
        if not isinstance(input, torch.Tensor) or not isinstance(target, torch.Tensor):
            return
        self.calls += 1
        if self.calls > self.ALWAYS or doc.steps:
            doc.unsubscribe(self, "on_loss")  # no first loss to judge any more
            return
        if not input.requires_grad or labels_out_of_range(event) is not None:
            return
        doc.unsubscribe(self, "on_loss")  # the first loss is the one
        value, classes = _first_loss(doc, event)
        if value is None:
            return
        expected = math.log(classes)
        if not math.isfinite(value) or value <= max(3 * expected, expected + 2):
            return
        site = event.site
        if site is None:
            return
        std = float(input.detach().float().std()) if input.numel() > 1 else 0.0
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


def _first_loss(doc: Reporter, event: LossEvent) -> tuple[float | None, int]:
    """The loss the call computes, in fp32 and plainly (no weights, no smoothing), and
    the number of classes; ``None`` when it does not tell a fresh model's confidence."""
    input, target = event.input.detach(), event.target.detach()
    kwargs = event.kwargs
    if kwargs.get("weight") is not None or kwargs.get("label_smoothing", 0.0):
        return None, 0
    if input.device != target.device:
        return None, 0  # the loss call itself will fail: device-mismatch explains it
    if input.dim() >= 3 and tuple(target.shape) != (input.shape[0], *input.shape[2:]):
        return None, 0  # a shape bug: the loss call will name it
    if event.name == "cross_entropy" and input.dim() >= 2 and input.shape[1] > 1:
        classes = input.shape[1]
        if target.is_floating_point():
            return None, 0
        ignore = kwargs.get("ignore_index", -100)
        with doc.muted():
            value = torch.nn.functional.cross_entropy(input.float(), target,
                                                      ignore_index=ignore)  # fmt: skip
            # With the targets of other samples: a margin loss (ArcFace, CosFace) lowers
            # the true class's logit by design; then only the true classes' loss is high,
            # not every class's.
            others = torch.nn.functional.cross_entropy(
                input.float(), target.roll(1, 0), ignore_index=ignore
            )
        if target.numel() > 1 and float(others) <= max(3 * math.log(classes),
                                                       math.log(classes) + 2):  # fmt: skip
            return None, 0
        return float(value), classes
    if event.name == "binary_cross_entropy_with_logits" and target.is_floating_point():
        with doc.muted():
            value = torch.nn.functional.binary_cross_entropy_with_logits(
                input.float(), target.float()
            )
        return float(value), 2
    return None, 0
