"""A sample taken apart into named fields: the inputs, and the target when there is one.

An ``(input, target)`` pair gives ``input`` and ``target``; a dict, a named tuple or a
dataclass gives its keys (the target is the one called ``label``, ``labels``, ``target``,
``targets``, ``y`` or ``class``); a longer tuple gives ``0``, ``1``, ...; a bare tensor is
the input alone. Values that are not numbers (strings, ids) are left out.

Example:
    >>> import torch
    >>> split_fields({"pixels": torch.zeros(3), "label": 2})
    ({'pixels': tensor([0., 0., 0.])}, 'label', tensor(2))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch

# Keys that name the target in dict samples, in order of preference.
TARGET_KEYS = ("label", "labels", "target", "targets", "y", "class")
# Nested containers deeper than this are summarized as one field, not walked.
MAX_DEPTH = 3


def split_fields(sample: Any) -> tuple[dict[str, torch.Tensor], str | None, Any]:
    """``(inputs, target_name, target)``: the numeric inputs by name, and the target."""
    named = _named(sample)
    if named is None:
        tensor = as_tensor(sample)
        return ({"input": tensor} if tensor is not None else {}), None, None
    target_name = _target_name(named, sample)
    inputs: dict[str, torch.Tensor] = {}
    for name, value in named.items():
        if name != target_name:
            _flatten(name, value, inputs, 1)
    target = as_tensor(named[target_name]) if target_name is not None else None
    return inputs, (target_name if target is not None else None), target


def _named(sample: Any) -> dict[str, Any] | None:
    if isinstance(sample, Mapping):
        return {str(k): v for k, v in sample.items()}
    if isinstance(sample, tuple) and hasattr(sample, "_fields"):
        return dict(zip(sample._fields, sample))
    if dataclasses.is_dataclass(sample) and not isinstance(sample, type):
        return {f.name: getattr(sample, f.name) for f in dataclasses.fields(sample)}
    if isinstance(sample, (tuple, list)) and sample and not _is_numbers(sample):
        if len(sample) == 2:
            return {"input": sample[0], "target": sample[1]}
        return {str(i): v for i, v in enumerate(sample)}
    return None


def _target_name(named: dict[str, Any], sample: Any) -> str | None:
    if "target" in named and isinstance(sample, (tuple, list)) and not hasattr(sample, "_fields"):
        return "target"
    lowered = {k.lower(): k for k in named}
    for key in TARGET_KEYS:
        if key in lowered:
            return lowered[key]
    return None


def _flatten(name: str, value: Any, into: dict[str, torch.Tensor], depth: int) -> None:
    inner = _named(value) if depth < MAX_DEPTH else None
    if inner is not None and not isinstance(value, torch.Tensor):
        for key, child in inner.items():
            _flatten(f"{name}.{key}", child, into, depth + 1)
        return
    tensor = as_tensor(value)
    if tensor is not None:
        into[name] = tensor


def _is_numbers(seq: Any) -> bool:
    return all(isinstance(v, (int, float, bool)) for v in seq)


def as_tensor(value: Any) -> torch.Tensor | None:
    """``value`` as a tensor (numbers, lists of numbers, numpy arrays), else ``None``."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (str, bytes)) or value is None:
        return None
    try:
        tensor = torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError):
        return None
    return tensor if tensor.dtype != torch.bool or tensor.numel() else None


def is_class_label(target: torch.Tensor | None, batched: bool = False) -> bool:
    """One integer class per sample (a scalar, or ``(B,)`` in a batch of targets)."""
    if target is None or target.is_floating_point() or target.is_complex():
        return False
    if batched and target.ndim == 0:
        return False
    return tuple(target.shape[1:] if batched else target.shape) in ((), (1,))
