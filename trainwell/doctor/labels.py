"""Targets of the classification losses: whether they lie in the range the loss
expects. What the ``label-out-of-range`` probe reports, and what ``loss-at-init`` needs
before it computes a first loss (one with bad labels would raise)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainwell.doctor.events import LossEvent


@dataclass
class OutOfRange:
    """Targets outside ``expected``: their range and the likely fix."""

    lo: float
    hi: float
    expected: str
    hint: str


def labels_out_of_range(event: LossEvent) -> OutOfRange | None:
    """The targets' range when they fall outside what the loss expects, else ``None``."""
    target = event.target
    if event.name in ("cross_entropy", "nll_loss"):
        return _class_labels(event)
    if target.is_floating_point() and target.numel():
        lo, hi = torch.aminmax(target.detach())
        if lo < 0 or hi > 1:
            hint = ("binary targets must be probabilities in [0, 1]; for class indices "
                    "use CrossEntropyLoss")  # fmt: skip
            return OutOfRange(float(lo), float(hi), "[0, 1]", hint)
    return None


def _class_labels(event: LossEvent) -> OutOfRange | None:
    input, target = event.input, event.target
    if target.is_floating_point() or not target.numel():
        return None  # class probabilities (soft targets)
    classes = input.shape[1] if input.dim() >= 2 else input.shape[0]
    if input.dim() >= 3 and tuple(target.shape) != (input.shape[0], *input.shape[2:]):
        return None  # a shape bug ((N, T, C) logits not transposed): PyTorch names it
    target = target.detach()
    lo, hi = (v.item() for v in torch.aminmax(target))
    if lo >= 0 and hi < classes:
        return None  # the common case: one reduction, two reads, no mask
    ignore = event.kwargs.get("ignore_index", -100)
    valid = target[target != ignore]
    if not valid.numel():
        return None
    lo, hi = (int(v) for v in torch.aminmax(valid))
    if lo >= 0 and hi < classes:
        return None
    if lo >= 1 and hi == classes:
        hint = "the labels look 1-based: use y - 1"
    elif hi >= classes:
        hint = (f"the model has {classes} outputs: make it {hi + 1} (the number of "
                "classes), or remap the labels to 0..C-1")  # fmt: skip
    else:
        hint = "negative labels: map them to 0..C-1 or to ignore_index"
    return OutOfRange(lo, hi, f"[0, {classes})", hint)
