"""Checks of the dry step that stop a run before it starts, in one line, where PyTorch
would raise mid-run with a traceback: a model with nothing to train, samples of
different lengths without ``data.collate``, class-index targets given to a loss that
compares values (``train.loss=mse`` on a classification data set).

Example:
    >>> import torch
    >>> check_trainable(torch.nn.ReLU())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    trainwell.errors.UserError: model: ReLU has no parameters, so there is nothing to train; ...
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from trainwell.engine.step.step_fn import is_class_target
from trainwell.errors import UserError

# Losses that compare real values: class indices are not what they take.
VALUE_LOSSES = (nn.MSELoss, nn.L1Loss, nn.SmoothL1Loss, nn.HuberLoss, nn.BCEWithLogitsLoss,
                nn.BCELoss)  # fmt: skip
# Of those, the ones that also refuse integer targets of the outputs' own shape.
FLOAT_ONLY = (nn.HuberLoss, nn.BCEWithLogitsLoss, nn.BCELoss)


def check_trainable(model: nn.Module) -> None:
    """Refuse a model without a trainable parameter: its loss has no gradient, and the
    first backward would fail ("element 0 of tensors does not require grad")."""
    params = list(model.parameters())
    if any(p.requires_grad for p in params):
        return
    name = type(model).__name__
    if not params:
        raise UserError(f"model: {name} has no parameters, so there is nothing to train; give "
                        "a model with weights (a model.name that builds layers)")  # fmt: skip
    raise UserError(f"model: every parameter of {name} ({len(params)}) is frozen "
                    "(requires_grad=False), so there is nothing to train; unfreeze "
                    "some")  # fmt: skip


def collated(first_batch: Callable[[], Any]) -> Any:
    """The dry step's batch; samples of different shapes that the default collate cannot
    stack are one line naming ``data.collate``, not the collate's traceback."""
    try:
        return first_batch()
    except RuntimeError as exc:
        text = str(exc)
        if "stack expects each tensor to be equal size" not in text or not _in_collate(exc):
            raise
        detail = text.split("but got", 1)[-1].strip().rstrip(".")
        raise UserError(
            f"data.collate: the samples differ in shape ({detail}) and the default collate "
            "stacks them into one tensor; set data.collate to the import path of a "
            "collate_fn that pads them (torch.nn.utils.rnn.pad_sequence), "
            "'package.module:collate'"
        ) from None


def check_collate(data: Any, collate: Callable | None, n: int = 16) -> None:
    """Collate ``n`` samples spread over a map-style data set as training will: lengths
    that differ beyond the dry step's first two samples are found before the run too."""
    from torch.utils.data import DataLoader, IterableDataset, default_collate

    if isinstance(data, (DataLoader, IterableDataset)) or not hasattr(data, "__len__"):
        return
    size = len(data)
    picked = sorted({round(i * (size - 1) / max(n - 1, 1)) for i in range(min(n, size))})
    collated(lambda: (collate or default_collate)([data[i] for i in picked]))


def _in_collate(exc: BaseException) -> bool:
    """Raised in PyTorch's default collate (not in the user's own code)."""
    frames = traceback.extract_tb(exc.__traceback__)
    return any(f.filename.replace("\\", "/").endswith("data/_utils/collate.py") for f in frames)


def check_value_targets(outputs: Any, targets: Any, loss_fn: Any) -> None:
    """A loss that compares values given class indices (``train.loss=mse`` on labels):
    ``(N, C)`` outputs against ``(N,)`` integers would fail to broadcast mid-run (or,
    for a batch of C samples, broadcast into a useless loss)."""
    if not isinstance(loss_fn, VALUE_LOSSES) or not isinstance(outputs, torch.Tensor):
        return
    if not isinstance(targets, torch.Tensor) or targets.is_floating_point():
        return
    name, dtype = type(loss_fn).__name__, str(targets.dtype).removeprefix("torch.")
    if is_class_target(outputs, targets):
        raise UserError(
            f"train.loss: {name} compares real values, but the targets are class indices "
            f"({dtype}, one per sample) and the model outputs {outputs.shape[1]} scores per "
            "sample; for classes use train.loss=cross_entropy, for regression give float "
            "targets shaped like the outputs"
        )
    if isinstance(loss_fn, FLOAT_ONLY):
        raise UserError(f"train.loss: {name} takes float targets, but they are {dtype}; make "
                        "them floats (.float()) in the data set")  # fmt: skip
