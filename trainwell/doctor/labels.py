"""Targets of the classification losses: whether they lie in the range the loss
expects. What the ``label-out-of-range`` probe reports, and what ``loss-at-init`` needs
before it computes a first loss (one with bad labels would raise)."""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass

import torch

from trainwell.doctor.events import BatchEvent, LossEvent
from trainwell.doctor.sites import Site, parse, variable_site


@dataclass
class OutOfRange:
    """Targets outside ``expected``: their range and the likely fix."""

    lo: float
    hi: float
    expected: str
    hint: str
    one_based: bool = False  # labels 1..C: made off by one where they were made
    classes: int = 0  # the model's outputs, when the fix is a head with more of them


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
        return OutOfRange(lo, hi, f"[0, {classes})", "the labels look 1-based: use y - 1", True)
    if hi >= classes:
        hint = (f"the model has {classes} outputs: make it {hi + 1} (the number of "
                "classes), or remap the labels to 0..C-1")  # fmt: skip
        # A few labels past the end: the head is too small (num_classes = 9 for 10
        # classes). Far past it (255 for "void"), the labels are the bug.
        small = classes if lo >= 0 and hi < 2 * classes + 2 else 0
        return OutOfRange(lo, hi, f"[0, {classes})", hint, classes=small)
    hint = "negative labels: map them to 0..C-1 or to ignore_index"
    return OutOfRange(lo, hi, f"[0, {classes})", hint)


def label_origin(event: LossEvent, batch: BatchEvent | None) -> Site | None:
    """Where the labels the loss got were made, for 1-based labels (the fix, ``- 1``,
    goes there): the user's variable holding them, the target itself or the tensor it
    indexes, or a TensorDataset's labels behind the DataLoader, found by identity in the
    user's frames; ``None`` when not found."""
    frame = event.frame
    if frame is None or not isinstance(event.target, torch.Tensor):
        return None
    # A TensorDataset's labels behind the DataLoader first: the batch itself is only
    # the loop's variable.
    dataset = getattr(batch.loader, "_dataset", None) if batch is not None else None
    tensors = getattr(dataset, "tensors", ())
    behind = [t for t in tensors if isinstance(t, torch.Tensor) and not t.is_floating_point()]
    for wanted in (behind, [event.target, event.target._base]):
        ids = {id(t) for t in wanted if t is not None}
        site = variable_site(frame, _one_of(ids), assigned_line) if ids else None
        if site is not None:
            return site
    # y[idx] copies: the variable the loss's target expression indexes.
    name = _target_name(frame.f_code.co_filename, frame.f_lineno)
    value = frame.f_locals.get(name, frame.f_globals.get(name)) if name else None
    if name and isinstance(value, torch.Tensor) and not value.is_floating_point():
        line = assigned_line(frame.f_code.co_filename, name)
        return Site(frame.f_code.co_filename, line) if line else None
    return None


def _one_of(ids: set[int]) -> Callable[[object], bool]:
    """Whether a value is one of the objects ``ids`` names."""
    return lambda value: id(value) in ids


def _target_name(file: str, line: int) -> str | None:
    """``y`` of a loss call ``crit(out, y[idx].long())`` on ``line``."""
    tree = parse(file)
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Call) and node.lineno == line and len(node.args) >= 2:
            target = node.args[1]
            while isinstance(target, (ast.Subscript, ast.Call, ast.Attribute)):
                target = target.func if isinstance(target, ast.Call) else target.value
            if isinstance(target, ast.Name):
                return target.id
    return None


def assigned_line(file: str, name: str) -> int | None:
    """The last line that makes ``name`` (``name = ...``, not ``name = name.to(device)``)
    in ``file``."""
    tree = parse(file)
    lines = [
        node.lineno
        for node in (ast.walk(tree) if tree is not None else ())
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
        and not any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node.value))
    ]
    return max(lines) if lines else None
