"""A dry step on the first two training samples, before anything is written or trained.

What can be checked up front is checked here, so bad input stops with one line instead
of failing mid-run: a step that returns no loss, a loss that is not a scalar or is
detached from the model, a metric that is not a scalar tensor; for the step built from a
loss, class targets outside the model's outputs (a loss's ``ignore_index`` is not out of
range) and output/target shapes that the loss would broadcast (``(N, 1)`` against
``(N,)`` in MSE makes an ``(N, N)`` difference and a useless model).

Nothing of the run changes: the RNGs, the module modes and buffers (batch-norm
statistics) are put back, and no gradient is kept.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from trainwell.data import DataSplits, check_labels, targets_of
from trainwell.engine.build.dry_checks import check_trainable, check_value_targets, collated
from trainwell.engine.build.given_model import first_call, labels_of
from trainwell.engine.build.metric_guard import kept_metric_state
from trainwell.engine.loading.batch import sample_count, to_device
from trainwell.engine.step.step_fn import (
    CLASS_INDEX_LOSSES,
    NARROW_INTS,
    OBJECT_INPUTS,
    LossStep,
    StepError,
    Steps,
    ignore_index_of,
    is_class_target,
    split_pair,
    unpack,
)
from trainwell.errors import UserError


@dataclass
class Task:
    """What the dry step learned about the task (the loss-built step's checks only).

    Attributes:
        classification: outputs ``(N, C, ...)`` against integer targets ``(N, ...)``.
        num_classes: ``C``, for classification.
        ignore_index: the target value the loss skips, if any.
    """

    classification: bool = False
    num_classes: int | None = None
    ignore_index: int | None = None
    # The metric names a user's eval step returned on the dry batch (None: the loss's).
    eval_metrics: frozenset[str] | None = None
    # The metric names a user's train step returned on the dry batch (None: the loss's).
    train_metrics: frozenset[str] | None = None
    # A user's eval step returned "preds" and "target" (what train.metrics objects take).
    eval_inputs: bool = False
    # The model's first call in the dry step, (args, kwargs) on the CPU, and the batch's
    # targets (see trainwell.engine.build.given_model).
    example: tuple[tuple, dict] | None = None
    example_labels: torch.Tensor | None = None

    @property
    def has_accuracy(self) -> bool:
        """Evaluation reports an accuracy: the default monitor is then val/accuracy."""
        if self.eval_metrics is not None:
            return "accuracy" in self.eval_metrics
        return self.classification


def preflight(
    model: nn.Module,
    steps: Steps,
    splits: DataSplits,
    device: torch.device,
    first_batch: Callable[[], Any],
) -> Task:
    """The dry step on ``first_batch()``: checks the step's outputs (or, for the step built
    from a loss, the shapes and labels)."""
    check_trainable(model)
    with (
        _untouched(model),
        kept_metric_state(model, steps.train, steps.eval),
        first_call(model) as seen,
    ):
        batch = to_device(collated(first_batch), device)
        if steps.default:
            task = _check_loss_step(model, steps, splits, batch)
            if not isinstance(steps.eval, LossStep):  # the user's eval step decides
                task.eval_metrics, task.eval_inputs = _eval_names(model, steps, batch)
        else:
            task = _check_user_step(model, steps, batch)
    # The model's inputs for these samples: what fit(model=obj) keeps for export.
    task.example, task.example_labels = (seen[0] if seen else None), labels_of(batch)
    return task


@contextlib.contextmanager
def _untouched(model: nn.Module) -> Iterator[None]:
    """RNGs, module modes and buffers as they were before, whatever runs inside."""
    py_state, np_state = random.getstate(), np.random.get_state()
    modes = {m: m.training for m in model.modules()}
    buffers = {name: b.detach().clone() for name, b in model.named_buffers()}
    devices = [torch.cuda.current_device()] if torch.cuda.is_initialized() else []
    try:
        with torch.random.fork_rng(devices=devices):
            yield
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)
        for module, training in modes.items():
            module.training = training
        with torch.no_grad():
            for name, b in model.named_buffers():
                if name in buffers:
                    b.copy_(buffers[name])
        model.zero_grad(set_to_none=True)


def _check_loss_step(model: nn.Module, steps: Steps, splits: DataSplits, batch: Any) -> Task:
    inputs, targets = split_pair(batch)
    loss_fn = steps.loss_fn
    model.eval()
    with torch.inference_mode():
        outputs = model(inputs)
        _check_outputs(outputs, targets, loss_fn)
    _check_target_type(outputs, targets, loss_fn)
    check_value_targets(outputs, targets, loss_fn)
    if isinstance(targets, torch.Tensor) and targets.dtype in NARROW_INTS:
        targets = targets.long()  # as the step widens them
    ignore = ignore_index_of(loss_fn)
    if is_class_target(outputs, targets):
        num_classes = int(outputs.shape[1])
        for split, ds in (("train", splits.train), ("val", splits.val), ("test", splits.test)):
            check_labels(ds, num_classes, split, ignore)
        return Task(True, num_classes, ignore)
    _check_broadcast(outputs, targets)
    return Task(False, None, ignore)


def _check_outputs(outputs: Any, targets: Any, loss_fn: Any) -> None:
    """Outputs the default step cannot hand to the loss (a dataclass, a dict, a tuple
    from the model) are one line naming ``train.step``, not a TypeError mid-run."""
    if isinstance(outputs, torch.Tensor):
        return
    try:
        loss = loss_fn(outputs, targets)
    except Exception:  # noqa: BLE001 - any failure of the loss on them is the news
        loss = None
    if isinstance(loss, torch.Tensor) and loss.numel() == 1:
        return  # a loss (the user's own) that takes these outputs as they are
    fields = _fields_of(outputs)
    pick = next((f for f in ("logits", "prediction", "output", "out") if f in fields), None)
    shown = f" ({', '.join(fields[:6])})" if fields else ""
    attr = (f"[{pick!r}]" if isinstance(outputs, dict) else f".{pick}") if pick else "[0]"
    raise StepError(
        f"train.step: the model returns {type(outputs).__name__}{shown}, not a tensor, so "
        "the default step cannot pass it to train.loss; write a step that picks the output "
        f"(def step(model, batch): x, y = batch; return loss_fn(model(x){attr}, y)) and set "
        "train.step: 'package.module:step' (or fit(step_fn=step))"
    )


def _fields_of(outputs: Any) -> list[str]:
    import dataclasses

    if isinstance(outputs, dict):
        return [str(k) for k in outputs]
    if dataclasses.is_dataclass(outputs):
        return [f.name for f in dataclasses.fields(outputs)]
    if isinstance(outputs, tuple) and hasattr(outputs, "_fields"):
        return list(outputs._fields)
    return []


def _check_target_type(outputs: Any, targets: Any, loss_fn: Any) -> None:
    """Targets a loss cannot take: not tensors (strings), or not class indices for a
    class-index loss (float or bool labels for cross-entropy)."""
    if not isinstance(targets, torch.Tensor):
        raise UserError(
            f"train.loss: the targets are {type(targets).__name__}, not a tensor (string "
            "labels?); map them to class indices or numbers in the data set"
        )
    class_loss = isinstance(loss_fn, CLASS_INDEX_LOSSES)
    shaped = isinstance(outputs, torch.Tensor) and outputs.ndim == targets.ndim + 1
    if class_loss and shaped and (targets.is_floating_point() or targets.dtype == torch.bool):
        name = type(loss_fn).__name__
        raise UserError(
            f"train.loss: {name} takes class indices, but the targets are "
            f"{str(targets.dtype).removeprefix('torch.')}; make them integers (.long()) in the "
            "data set"
        )


def _check_broadcast(outputs: Any, targets: Any) -> None:
    """Refuse regression shapes that a loss would broadcast into a different shape."""
    if not (isinstance(outputs, torch.Tensor) and isinstance(targets, torch.Tensor)):
        return
    if not targets.is_floating_point() or outputs.shape == targets.shape:
        return
    try:
        broadcast = torch.broadcast_shapes(outputs.shape, targets.shape)
    except RuntimeError:
        broadcast = None
    if broadcast == outputs.shape:
        return  # targets shared over the batch: deliberate, and the loss keeps its shape
    fix = (
        "squeeze the outputs (outputs.squeeze(-1)) or unsqueeze the targets"
        if outputs.numel() == targets.numel()
        else "make the model output the targets' shape"
    )
    n = outputs.shape[0] if outputs.ndim else None
    raise UserError(
        f"train.loss: the model outputs {_shape(outputs.shape, n)} but the targets are "
        f"{_shape(targets.shape, n)}; the loss would "
        + (f"broadcast them to {_shape(broadcast, n)}" if broadcast else "fail on them")
        + f" and train a useless model: {fix}"
    )


def _shape(shape: tuple[int, ...], n: int | None) -> str:
    """``(N, 1)``: the batch size (the dry step's, not training's) shown as N."""
    dims = ["N" if d == n else str(d) for d in shape]
    return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"


def _check_user_step(model: nn.Module, steps: Steps, batch: Any) -> Task:
    """The dry step (and eval step); notes the metric names training and evaluation report."""
    model.train()
    out = steps.train(model, batch)
    loss, metrics, _ = unpack(out, sample_count(batch), "train.step")
    if not loss.requires_grad:
        raise StepError(
            "train.step: the loss does not depend on any trainable parameter (it was "
            "detached: .item(), .detach(), torch.no_grad() in the step, or a frozen model)"
        )
    del loss
    task = Task(train_metrics=frozenset(metrics))
    if steps.eval is not steps.train:
        task.eval_metrics, task.eval_inputs = _eval_names(model, steps, batch)
    else:
        task.eval_metrics, task.eval_inputs = frozenset(metrics), _has_inputs(out)
    return task


def _eval_names(model: nn.Module, steps: Steps, batch: Any) -> tuple[frozenset[str], bool]:
    model.eval()
    with torch.inference_mode():
        out = steps.eval(model, batch)
        _, metrics, _ = unpack(out, sample_count(batch), "train.eval_step")
    return frozenset(metrics), _has_inputs(out)


def _has_inputs(out: Any) -> bool:
    return isinstance(out, Mapping) and all(k in out for k in OBJECT_INPUTS)


def label_checker(task: Task, train: Any) -> Callable[[Any], None] | None:
    """A check of each batch's class targets, for data sets that could not show them up
    front (no ``.targets``); ``None`` when there is nothing left to check."""
    if task.num_classes is None or targets_of(train) is not None:
        return None
    num_classes, ignore = task.num_classes, task.ignore_index

    def check(batch: Any) -> None:
        # Targets are still on the CPU here: reading them costs no device sync.
        targets = split_pair(batch)[1]
        if not isinstance(targets, torch.Tensor) or targets.is_floating_point():
            return
        bad = (targets < 0) | (targets >= num_classes)
        if ignore is not None:
            bad &= targets != ignore
        if bool(bad.any()):
            raise UserError(
                f"labels out of range: a training batch holds targets "
                f"{sorted(set(targets[bad].tolist()))[:5]} outside [0, {num_classes}) (the "
                f"model has {num_classes} outputs)"
            )

    return check
