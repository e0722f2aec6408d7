"""Random tensors of a configured shape, for benchmarks and smoke tests."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.utils.data import TensorDataset

from trainwell.errors import UserError


class SyntheticDataset(TensorDataset):
    """A TensorDataset that also knows its number of classes."""

    num_classes: int


def make_synthetic(
    num_samples: int = 1024,
    shape: Sequence[int] = (1, 8, 8),
    num_classes: int = 10,
    seed: int = 0,
) -> SyntheticDataset:
    """Gaussian inputs labelled by a fixed random linear teacher, so a model can learn.

    Example:
        >>> ds = make_synthetic(num_samples=8, shape=(3,), num_classes=2)
        >>> ds[0][0].shape, ds.num_classes
        (torch.Size([3]), 2)
    """
    if num_samples <= 0 or num_classes <= 1 or any(int(s) <= 0 for s in shape):
        raise UserError(
            "data.kwargs: synthetic needs num_samples > 0, num_classes > 1 and a positive shape; "
            f"got num_samples={num_samples}, num_classes={num_classes}, shape={list(shape)}"
        )
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(num_samples, *[int(s) for s in shape], generator=g)
    teacher = torch.randn(x[0].numel(), num_classes, generator=g)
    y = (x.flatten(1) @ teacher).argmax(1)
    ds = SyntheticDataset(x, y)
    ds.num_classes = num_classes
    return ds
