"""Batches of any shape: moved to the device whole, counted, and described.

A batch is whatever the DataLoader yields: a tensor, or any nesting of tuples, lists,
dicts, named tuples and dataclasses of tensors. Tensors move to the device; other leaves
(strings, ids, ``None``) pass through untouched.

Example:
    >>> batch = {"input_ids": torch.zeros(4, 7, dtype=torch.long), "id": ["a", "b", "c", "d"]}
    >>> moved = to_device(batch, torch.device("cpu"))
    >>> sample_count(moved), describe(moved)
    (4, '{input_ids: (4, 7) int64, id: list[4]}')
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch


def to_device(batch: Any, device: torch.device, channels_last: bool = False) -> Any:
    """``batch`` with every tensor on ``device`` (``non_blocking``), its structure kept;
    with ``channels_last``, 4-D floating tensors (images) in that memory format.

    Example:
        >>> Point = __import__("collections").namedtuple("Point", "x y")
        >>> to_device(Point(torch.ones(2), "label"), torch.device("cpu"))
        Point(x=tensor([1., 1.]), y='label')
    """
    if isinstance(batch, torch.Tensor):
        if channels_last and batch.dim() == 4 and batch.is_floating_point():
            return batch.to(device, non_blocking=True, memory_format=torch.channels_last)
        return batch.to(device, non_blocking=True)
    if isinstance(batch, Mapping):
        moved = {k: to_device(v, device, channels_last) for k, v in batch.items()}
        # Typed as a class: the abstract Mapping's constructor takes no argument, but the
        # concrete type a batch has (OrderedDict, a BatchEncoding) is tried with the dict.
        mapping_type: type[Any] = type(batch)
        try:
            return moved if mapping_type is dict else mapping_type(moved)
        except TypeError:  # a mapping type that cannot be built from a dict
            return moved
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a named tuple
        return type(batch)(*(to_device(v, device, channels_last) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(v, device, channels_last) for v in batch)
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        changes = {f.name: to_device(getattr(batch, f.name), device, channels_last)
                   for f in _fields(batch)}  # fmt: skip
        return dataclasses.replace(batch, **changes)
    return batch


def _fields(obj: Any) -> list[dataclasses.Field]:
    # Fields set in __init__ only: replace() refuses init=False ones.
    return [f for f in dataclasses.fields(obj) if f.init]


def first_tensor(batch: Any) -> torch.Tensor | None:
    """The first tensor met walking ``batch`` depth first, or ``None``."""
    if isinstance(batch, torch.Tensor):
        return batch
    if isinstance(batch, Mapping):
        children: Any = batch.values()
    elif isinstance(batch, (list, tuple)):
        children = batch
    elif dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        children = [getattr(batch, f.name) for f in dataclasses.fields(batch)]
    else:
        return None
    for child in children:
        found = first_tensor(child)
        if found is not None:
            return found
    return None


def sample_count(batch: Any) -> int:
    """The leading size of the batch's first tensor (1 for a batch without tensors)."""
    t: torch.Tensor | None
    if type(batch) in (list, tuple) and batch and isinstance(batch[0], torch.Tensor):
        t = batch[0]  # (input, target): the usual, without the walk
    else:
        t = first_tensor(batch)
    return int(t.shape[0]) if t is not None and t.ndim > 0 else 1


def describe(batch: Any, depth: int = 0) -> str:
    """A short, one-line picture of a batch's structure, shapes and dtypes."""
    if isinstance(batch, torch.Tensor):
        return f"{tuple(batch.shape)} {str(batch.dtype).removeprefix('torch.')}"
    if depth > 3:
        return "..."
    if isinstance(batch, Mapping):
        inner = ", ".join(f"{k}: {describe(v, depth + 1)}" for k, v in batch.items())
        return "{" + inner + "}"
    if isinstance(batch, tuple) and not hasattr(batch, "_fields"):
        return "(" + ", ".join(describe(v, depth + 1) for v in batch) + ")"
    if isinstance(batch, list):
        if batch and all(isinstance(v, torch.Tensor) for v in batch):
            return "[" + ", ".join(describe(v, depth + 1) for v in batch) + "]"
        return f"list[{len(batch)}]"
    if dataclasses.is_dataclass(batch) or hasattr(batch, "_fields"):
        return f"{type(batch).__name__}(...)"
    return type(batch).__name__


def collate_samples(samples: list[Any]) -> Any:
    """PyTorch's ``default_collate``, also for dataclass samples (field by field, at any
    depth), which it refuses.

    Example:
        >>> @dataclasses.dataclass
        ... class Item:
        ...     x: torch.Tensor
        ...     name: str
        >>> collate_samples([Item(torch.ones(2), "a"), Item(torch.zeros(2), "b")])
        Item(x=tensor([[1., 1.],
                [0., 0.]]), name=['a', 'b'])
    """
    from torch.utils.data import default_collate

    first = samples[0]
    if not _holds_dataclass(first):
        return default_collate(samples)
    if dataclasses.is_dataclass(first) and not isinstance(first, type):
        fields = _fields(first)
        return type(first)(**{f.name: collate_samples([getattr(s, f.name) for s in samples])
                              for f in fields})  # fmt: skip
    if isinstance(first, Mapping):
        return {k: collate_samples([s[k] for s in samples]) for k in first}
    columns = [collate_samples(list(column)) for column in zip(*samples)]
    return type(first)(*columns) if hasattr(first, "_fields") else columns


def collate_for(sample: Any) -> Any:
    """The collate function a sample needs: ``None`` (PyTorch's default, the fastest) unless
    it holds dataclasses (:func:`collate_samples`)."""
    return collate_samples if _holds_dataclass(sample) else None


def _holds_dataclass(sample: Any, depth: int = 0) -> bool:
    if dataclasses.is_dataclass(sample) and not isinstance(sample, type):
        return True
    if depth > 4:
        return False
    if isinstance(sample, Mapping):
        return any(_holds_dataclass(v, depth + 1) for v in sample.values())
    if isinstance(sample, (list, tuple)):
        return any(_holds_dataclass(v, depth + 1) for v in sample)
    return False
