"""Real batches of a run's data, as the model sees them.

A batch reaches the model through the run's step function: ``(input, target)`` for the
step built from a loss, anything for a user's step (``model(batch["input_ids"])``). So the
step itself is run on the batch with a stand-in for the model that records what it is
called with and stops the step there: the model's inputs come out exactly as training fed
them, whatever the task, with no model code needed (an ONNX file predicts a split too).
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, default_collate

from trainwell.engine.step.step_fn import is_class_target
from trainwell.errors import UserError
from trainwell.export.source import RunParts

# Keys of a dict batch that hold the targets, by the usual conventions.
_LABEL_KEYS = ("labels", "label", "targets", "target", "y")


@dataclass
class Batch:
    """The model's named inputs for one batch, and its targets when the batch has them."""

    inputs: dict[str, torch.Tensor]
    labels: torch.Tensor | None

    @property
    def size(self) -> int:
        return int(next(iter(self.inputs.values())).shape[0])


class _Called(Exception):
    """Raised by the stand-in once the step has called the model: the step stops there."""


class _StandIn:
    """Records the step's call of the model; attributes come from the real model if any."""

    def __init__(self, model: nn.Module | None) -> None:
        self.model = model
        self.args: tuple[Any, ...] = ()
        self.kwargs: dict[str, Any] = {}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.args, self.kwargs = args, kwargs
        raise _Called

    def __getattr__(self, name: str) -> Any:
        if self.model is None:
            raise UserError(
                f"the run's step uses model.{name} before calling the model, so its inputs "
                "cannot be found without the model code; give INPUT.npy instead"
            )
        return getattr(self.model, name)


def model_inputs(
    parts: RunParts, batch: Any, model: nn.Module | None = None, names: list[str] | None = None
) -> dict[str, torch.Tensor]:
    """The model's inputs in ``batch``, named by the model's ``forward`` (or ``names``).

    Example:
        >>> from trainwell.config import load_config
        >>> from trainwell.export.source import build_run_parts
        >>> parts = build_run_parts(load_config(overrides=["data.name=synthetic"]))
        >>> net = torch.nn.Sequential(torch.nn.Flatten())
        >>> x = model_inputs(parts, (torch.zeros(2, 1, 28, 28), torch.zeros(2)), net)
        >>> {k: tuple(v.shape) for k, v in x.items()}
        {'input': (2, 1, 28, 28)}
    """
    stand_in = _StandIn(model)
    try:
        # A duck-typed model on purpose: the step calls it where it would call the model,
        # and any attribute the step reads first comes from the real model.
        parts.steps.eval(cast(nn.Module, stand_in), batch)
    except _Called:
        pass
    else:
        raise UserError("the run's step never calls the model, so it has no inputs to export")
    named = name_inputs(stand_in.args, stand_in.kwargs, model, names)
    for name, value in named.items():
        if not isinstance(value, torch.Tensor):
            raise UserError(
                f"the model's input {name!r} is a {type(value).__name__}; export and predict "
                "take models whose inputs are tensors"
            )
    return named


def name_inputs(
    args: tuple[Any, ...], kwargs: dict[str, Any], model: nn.Module | None, names: list[str] | None
) -> dict[str, Any]:
    """The inputs of one call of the model by name: ``forward``'s parameter names, else
    ``names``, else ``input_0``, ``input_1``, ...; keyword inputs keep their own.

    Example:
        >>> name_inputs((1, 2), {"mask": 3}, None, None)
        {'input_0': 1, 'input_1': 2, 'mask': 3}
        >>> name_inputs((1,), {}, torch.nn.Linear(2, 2), None)
        {'input': 1}
    """
    if model is not None:
        params = inspect.signature(model.forward).parameters.values()
        plain = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if len(args) <= len(plain):  # else: *args; numbered names below
            bound = dict(zip(plain, args))
            order = [n for n in plain if n in bound or n in kwargs]
            return {n: bound[n] if n in bound else kwargs[n] for n in order}
    if names is None:
        names = [f"input_{i}" for i in range(len(args))]
    if len(args) > len(names):
        raise UserError(f"the model is called with {len(args)} inputs; it takes {len(names)}")
    return {**dict(zip(names, args)), **kwargs}


def labels_of(parts: RunParts, batch: Any) -> torch.Tensor | None:
    """The targets of a batch: the second of an ``(input, target)`` pair, or a dict's
    ``labels`` / ``label`` / ``targets`` / ``target`` / ``y``."""
    found: Any = None
    if isinstance(batch, (tuple, list)) and len(batch) == 2:
        found = batch[1]
    elif isinstance(batch, dict):
        found = next((batch[k] for k in _LABEL_KEYS if k in batch), None)
    return found if isinstance(found, torch.Tensor) else None


def raw_batches(parts: RunParts, split: str, batch_size: int) -> Iterator[Any]:
    """The collated batches of one split, in order, ``batch_size`` samples each."""
    data = getattr(_splits(parts), split)
    if data is None:
        have = [s for s in ("train", "val", "test") if getattr(parts.splits, s) is not None]
        raise UserError(
            f"the run's data ({parts.cfg.data.name}) has no {split} split; use --split "
            f"{' or '.join(have)}"
        )
    if isinstance(data, DataLoader):
        yield from data  # a user's own loader batches itself
        return
    collate = parts.collate or default_collate
    if isinstance(data, IterableDataset):
        samples = iter(data)
        while chunk := list(itertools.islice(samples, batch_size)):
            yield collate(chunk)
        return
    for start in range(0, len(data), batch_size):
        yield collate([data[i] for i in range(start, min(start + batch_size, len(data)))])


def sample_batch(parts: RunParts, size: int) -> Any:
    """A batch of exactly ``size`` real samples (the validation split's first, repeated if
    the split is smaller), collated as training collates them."""
    splits = _splits(parts)
    data = next(d for d in (splits.val, splits.test, splits.train) if d is not None)
    if isinstance(data, DataLoader):
        data = data.dataset
    if isinstance(data, IterableDataset):
        pool = list(itertools.islice(iter(data), size))
    else:
        pool = [data[i] for i in range(min(size, len(data)))]
    if not pool:
        raise UserError(f"the run's data ({parts.cfg.data.name}) yields no samples")
    samples = [pool[i % len(pool)] for i in range(size)]
    return (parts.collate or default_collate)(samples)


def _splits(parts: RunParts) -> Any:
    if parts.splits is None:
        raise UserError(
            "the run trained on data passed to fit(train_data=...), which it cannot read "
            "back: give INPUT.npy (predict), or predict in Python on your own data"
        )
    return parts.splits


def describe_task(output: torch.Tensor, labels: torch.Tensor | None) -> dict[str, Any]:
    """What the outputs mean, learned from the targets: class scores along a dimension,
    regression values, or outputs without a known meaning.

    Example:
        >>> describe_task(torch.zeros(4, 3), torch.tensor([0, 2, 1, 1]))
        {'kind': 'classification', 'class_dim': 1, 'num_classes': 3}
        >>> describe_task(torch.zeros(4, 1), torch.zeros(4, 1))
        {'kind': 'regression'}
    """
    if labels is None:
        return {"kind": "outputs"}
    integer = not (labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool)
    if integer and is_class_target(output, labels):
        return {"kind": "classification", "class_dim": 1, "num_classes": int(output.shape[1])}
    if integer and output.ndim == labels.ndim + 1 and output.shape[:-1] == labels.shape:
        # (N, L, V) against (N, L): a language model's scores per token, classes last.
        return {"kind": "classification", "class_dim": -1, "num_classes": int(output.shape[-1])}
    if labels.is_floating_point() and output.shape == labels.shape:
        return {"kind": "regression"}
    return {"kind": "outputs"}
