"""The step function: the forward and the loss of one micro-batch, the user's to write.

A step is ``step(model, batch) -> loss`` or ``-> {"loss": loss, "name": value, ...}``:
the loss is a scalar tensor; every other value is a scalar tensor that becomes a metric
(``train/<name>``, ``val/<name>``, ``test/<name>``), averaged over samples. The optional
key ``"batch_size"`` (an int or a scalar tensor) says how many samples the batch counts
for in those averages (tokens for a language model, say); by default it is the leading
size of the batch's first tensor. A metric may also be a pair ``(numerator,
denominator)``, e.g. ``(correct, valid_tokens)``: both are summed over the log window or
the evaluation and divided once, so the ratio is exact whatever the batches. The keys
``"preds"`` and ``"target"`` (any shape) are no metrics: they feed the ``train.metrics``
objects (:mod:`trainwell.engine.build.metric_objects`) in evaluation. Precision,
accumulation, DDP, clipping, the optimizer and the scheduler stay the engine's.

Without a step, the engine builds one from ``train.loss`` (:class:`LossStep`): batches are
``(input, target)``, the loss is ``loss_fn(model(input), target)``, and evaluation adds
the accuracy when the targets are class indices.

Example:
    >>> import torch.nn.functional as F
    >>> def step(model, batch):
    ...     loss = F.mse_loss(model(batch["x"]), batch["y"])
    ...     return {"loss": loss, "mae": (model(batch["x"]) - batch["y"]).abs().mean()}
    >>> out = step(nn.Linear(3, 1), {"x": torch.ones(4, 3), "y": torch.zeros(4, 1)})
    >>> loss, metrics, n = unpack(out, batch_size=4)
    >>> sorted(metrics), n
    (['loss', 'mae'], 4)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from trainwell.errors import UserError

# A metric in a step's mapping: a scalar tensor, or a ratio (numerator, denominator).
MetricValue = torch.Tensor | tuple[torch.Tensor, int | torch.Tensor]
# What a step returns: the loss, or a mapping of the loss, its metrics, the optional
# sample count (an int or a scalar tensor) and the optional preds/target tensors.
StepOutput = torch.Tensor | Mapping[str, MetricValue | int]
StepFn = Callable[[nn.Module, Any], StepOutput]
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

# Key of a step's mapping that is a sample count, not a metric.
BATCH_SIZE_KEY = "batch_size"
# Keys of a step's mapping that feed the train.metrics objects (the batch's outputs and
# targets), not metrics of their own.
OBJECT_INPUTS = ("preds", "target")


class StepError(UserError):
    """A step function returned something the engine cannot train on."""


def unpack(out: Any, batch_size: int, where: str = "the step") -> tuple[torch.Tensor, dict, int]:
    """``(loss, metrics, n)`` from a step's return value; ``metrics`` includes ``"loss"``;
    a ratio metric stays a ``(numerator, denominator)`` pair.

    Raises :class:`StepError` (one line) for no loss, a non-scalar loss or metric, or a
    value that is not a tensor. Costs no device sync.
    """
    if isinstance(out, torch.Tensor):
        if out.dim() != 0 or not out.is_floating_point():  # else: a scalar loss, the usual
            _check_scalar(out, "loss", where)
        return out, {"loss": out}, batch_size
    if not isinstance(out, Mapping):
        raise StepError(
            f"{where} returned {type(out).__name__}; return the loss (a scalar tensor) or a "
            "mapping {'loss': loss, 'metric': value, ...}"
        )
    if "loss" not in out:
        raise StepError(
            f"{where} returned a mapping without 'loss' (keys: {', '.join(map(str, out))}); "
            "put the loss to minimize under 'loss'"
        )
    metrics: dict[str, torch.Tensor] = {}
    n = batch_size
    for name, value in out.items():
        if name == BATCH_SIZE_KEY:
            n = _count(value, where)
            continue
        if name in OBJECT_INPUTS:
            continue
        if isinstance(value, tuple) and name != "loss":
            _check_ratio(value, str(name), where)
        else:
            _check_scalar(value, name, where)
        metrics[str(name)] = value
    return metrics["loss"], metrics, n


def _check_scalar(value: Any, name: str, where: str) -> None:
    if not isinstance(value, torch.Tensor):
        raise StepError(
            f"{where}: {name!r} is a {type(value).__name__}, not a tensor; return tensors "
            "(floats would force a device sync every step)"
        )
    if value.numel() != 1:
        raise StepError(
            f"{where}: {name!r} has shape {tuple(value.shape)}; it must be a scalar (reduce "
            "it, e.g. with .mean())"
        )
    if name == "loss" and not (value.is_floating_point() or value.is_complex()):
        raise StepError(f"{where}: the loss is a {value.dtype} tensor; it must be floating point")


def _check_ratio(value: tuple, name: str, where: str) -> None:
    if len(value) != 2:
        raise StepError(
            f"{where}: {name!r} is a tuple of {len(value)}; a ratio metric is a pair "
            "(numerator, denominator)"
        )
    _check_scalar(value[0], name, where)
    if not isinstance(value[1], (int, torch.Tensor)) or (
        isinstance(value[1], torch.Tensor) and value[1].numel() != 1
    ):
        raise StepError(f"{where}: the denominator of {name!r} must be an int or a scalar tensor")


def _count(value: Any, where: str) -> int:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        # A sample count the step computed on the device (tokens) is read here: the one
        # value that must be a Python number to weight the sums.
        value = value.item()
    if not isinstance(value, (int, float)) or value < 0:
        shown = repr(value)
        if isinstance(value, torch.Tensor):
            shown = f"a tensor of shape {tuple(value.shape)}"
        raise StepError(f"{where}: {BATCH_SIZE_KEY!r} must be a non-negative count; got {shown}")
    return int(value)


def bind_kwargs(fn: Any, kwargs: Mapping[str, Any], key: str) -> Any:
    """``fn`` with ``kwargs`` bound (``train.step_kwargs``), refused in one line when its
    signature has no place for them.

    Example:
        >>> def distill(model, batch, temperature=1.0):
        ...     return temperature
        >>> bind_kwargs(distill, {"temperature": 4.0}, "train.step_kwargs")(None, None)
        4.0
    """
    if not kwargs:
        return fn
    import functools
    import inspect

    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        signature = None  # a builtin or C callable: let the call say
    if signature is not None:
        try:
            signature.bind(None, None, **kwargs)
        except TypeError as exc:
            name = getattr(fn, "__qualname__", repr(fn))
            params = ", ".join(signature.parameters)
            raise UserError(f"{key}: {name}({params}) does not take them: {exc}") from None
    return functools.partial(fn, **kwargs)


@dataclass
class Steps:
    """The step functions of a run; ``loss_fn`` is set for the step built from a loss."""

    train: StepFn
    eval: StepFn
    loss_fn: LossFn | None = None

    @property
    def default(self) -> bool:
        """Built from ``train.loss`` (batches are ``(input, target)``), not the user's."""
        return self.loss_fn is not None


def split_pair(batch: Any) -> tuple[Any, Any]:
    """``(input, target)`` of a batch for the loss-built step; anything else is refused."""
    if isinstance(batch, (tuple, list)) and len(batch) == 2:
        return batch[0], batch[1]
    if isinstance(batch, (tuple, list)):
        shape = f"{len(batch)} elements"
    else:
        shape = f"a {type(batch).__name__}"
    raise StepError(
        f"batches are {shape}; the step built from train.loss takes (input, target) pairs. "
        "Write a step function for the rest (train.step: 'package.module:fn', or "
        "fit(step_fn=...)): def step(model, batch): return loss"
    )


def is_class_target(outputs: torch.Tensor, targets: Any) -> bool:
    """Class-index targets for these outputs: ``(N, C, ...)`` against integer ``(N, ...)``."""
    return (
        isinstance(outputs, torch.Tensor)
        and isinstance(targets, torch.Tensor)
        and outputs.ndim == targets.ndim + 1
        and outputs.ndim >= 2
        and outputs.shape[0] == targets.shape[0]
        and outputs.shape[2:] == targets.shape[1:]
        and not (targets.is_floating_point() or targets.is_complex() or targets.dtype == torch.bool)
    )


def ignore_index_of(loss_fn: Any) -> int | None:
    """The class index a loss skips (``nn.CrossEntropyLoss(ignore_index=...)``), if any."""
    value = getattr(loss_fn, "ignore_index", None)
    if value is None and hasattr(loss_fn, "keywords"):  # functools.partial(F.cross_entropy, ...)
        value = loss_fn.keywords.get("ignore_index")
    return int(value) if isinstance(value, int) else None


NARROW_INTS = (torch.int32, torch.int16, torch.int8, torch.uint8)

# Losses that take class indices (integers) when the targets have one dimension fewer.
CLASS_INDEX_LOSSES = (nn.CrossEntropyLoss, nn.NLLLoss)


@dataclass
class LossStep:
    """The step built from a loss: ``loss_fn(model(input), target)`` on ``(input, target)``.

    With ``accuracy=True`` (evaluation) it adds the share of class targets predicted right,
    skipping the loss's ``ignore_index``; per pixel for ``(N, C, H, W)`` outputs.

    Example:
        >>> step = LossStep(nn.CrossEntropyLoss(), accuracy=True)
        >>> out = step(nn.Linear(2, 3), (torch.zeros(4, 2), torch.tensor([0, 1, 2, 0])))
        >>> sorted(out)
        ['accuracy', 'loss']
    """

    loss_fn: LossFn
    accuracy: bool = False

    def __call__(self, model: nn.Module, batch: Any) -> torch.Tensor | dict[str, MetricValue]:
        inputs, targets = self.pair(batch)
        outputs = model(inputs)
        loss = self.loss_fn(outputs, targets)
        if not self.accuracy or not is_class_target(outputs, targets):
            return loss
        return {"loss": loss, "accuracy": class_hits(outputs, targets, self.ignore_index)}

    @staticmethod
    def pair(batch: Any) -> tuple[Any, Any]:
        """``(input, target)`` of ``batch``, the target widened to int64 where it is a
        narrower integer (:class:`StepError` for a batch that is no pair)."""
        if type(batch) in (list, tuple) and len(batch) == 2:  # the usual: no checks to run
            inputs, targets = batch
        else:
            inputs, targets = split_pair(batch)
        if isinstance(targets, torch.Tensor) and targets.dtype in NARROW_INTS:
            # int32 / uint8 labels (NumPy's, an image mask's): widened without loss, as
            # torch's class-index losses want int64.
            targets = targets.long()
        return inputs, targets

    @property
    def ignore_index(self) -> int | None:
        return ignore_index_of(self.loss_fn)


def class_hits(
    outputs: torch.Tensor, targets: torch.Tensor, ignore_index: int | None = None
) -> tuple[torch.Tensor, int | torch.Tensor]:
    """Accuracy as a ratio metric: (targets where the arg-max class is right, targets),
    ignored targets left out of both.

    Example:
        >>> class_hits(torch.tensor([[2.0, 0.0], [0.0, 1.0]]), torch.tensor([0, -100]), -100)
        (tensor(1), tensor(1))
    """
    hits = outputs.argmax(dim=1) == targets
    if ignore_index is None:
        return hits.sum(), targets.numel()
    valid = targets != ignore_index
    return (hits & valid).sum(), valid.sum()
