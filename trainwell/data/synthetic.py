"""Random tensors of a configured shape, for benchmarks and smoke tests."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.data import TensorDataset

from trainwell._options import check, check_int

# 2**31 float32 values is 8 GiB: more than a smoke test or a benchmark needs.
MAX_VALUES = 2**31


class SyntheticDataset(TensorDataset):
    """A TensorDataset that also knows its number of classes."""

    num_classes: int


def make_synthetic(
    num_samples: int = 1024,
    shape: Sequence[int] | int = (1, 8, 8),
    num_classes: int = 10,
    seed: int = 0,
) -> SyntheticDataset:
    """Gaussian inputs labelled by a fixed random linear teacher, so a model can learn.

    Example:
        >>> ds = make_synthetic(num_samples=8, shape=(3,), num_classes=2)
        >>> ds[0][0].shape, ds.num_classes
        (torch.Size([3]), 2)
    """
    check_int(num_samples, "data.kwargs: num_samples")
    check_int(num_classes, "data.kwargs: num_classes", low=2)
    # torch's generators take seeds of 64 bits; a bigger one fails inside manual_seed.
    check_int(seed, "data.kwargs: seed", low=0, high=2**64 - 1)
    # The dims come from the user's config (one int, ``shape: 8``, is allowed): any value
    # until check_int has seen it.
    raw: list[Any] = list(shape) if isinstance(shape, (list, tuple)) else [shape]
    dims: list[int] = []
    for dim in raw:
        check_int(dim, "data.kwargs: shape")
        dims.append(int(dim))
    # The inputs and the teacher are made in memory at once: refuse sizes that cannot
    # be, with the numbers, instead of an allocator error.
    values = math.prod(dims) * (num_samples + num_classes)
    check(
        values <= MAX_VALUES,
        "data.kwargs",
        f"synthetic data of {num_samples} samples shaped {dims} with {num_classes} classes "
        f"needs {values} values; at most {MAX_VALUES} (lower num_samples, shape or num_classes)",
    )
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(num_samples, *dims, generator=g)
    teacher = torch.randn(x[0].numel(), num_classes, generator=g)
    y = (x.flatten(1) @ teacher).argmax(1)
    ds = SyntheticDataset(x, y)
    ds.num_classes = num_classes
    return ds
