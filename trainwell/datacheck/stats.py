"""Running statistics of one field over many samples: mean, std, range, NaN/Inf, lengths.

Batches of samples of one shape are added at once (vectorized); samples of varying
shape one by one, and their lengths (the first dimension) are kept. Means and variances
combine with Chan's parallel formula in float64, so millions of values lose no digits.

Example:
    >>> import torch
    >>> s = FieldStats()
    >>> s.add_batch(torch.tensor([[1.0, 2.0], [3.0, float("nan")]]))
    >>> d = s.to_dict()
    >>> d["mean"], d["min"], d["max"], d["nan"], d["nonfinite_samples"]
    (2.0, 1.0, 3.0, 1, 1)
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

# A sample whose first dimension is at most this is taken as channels (C, H, W).
MAX_CHANNELS = 4


class Summary(NamedTuple):
    """Mean, std (population), min and max of a field's finite values."""

    mean: float
    std: float
    min: float
    max: float


@dataclass
class Moments:
    """Count, mean, sum of squared deviations, min and max of finite values."""

    n: int = 0
    mean: float = 0.0
    m2: float = 0.0
    lo: float = float("inf")
    hi: float = float("-inf")

    def add(self, values: torch.Tensor) -> None:
        """Fold in a tensor of finite values (any shape)."""
        n = values.numel()
        if n == 0:
            return
        # float32 values stay float32 (sums accumulate in float64); narrower floats and
        # integers (token ids of int64) are widened first.
        v = values if values.dtype in (torch.float32, torch.float64) else values.double()
        mean = float(v.sum(dtype=torch.float64)) / n
        m2 = float(((v - mean) ** 2).sum(dtype=torch.float64))
        total = self.n + n
        delta = mean - self.mean
        self.mean += delta * n / total
        self.m2 += m2 + delta * delta * self.n * n / total
        self.n = total
        lo, hi = torch.aminmax(v)
        self.lo = min(self.lo, float(lo))
        self.hi = max(self.hi, float(hi))

    def summary(self) -> Summary | None:
        """The values' mean, std, min and max; ``None`` before any value was added.

        Example:
            >>> m = Moments()
            >>> m.add(torch.tensor([1.0, 3.0]))
            >>> m.summary()
            Summary(mean=2.0, std=1.0, min=1.0, max=3.0)
        """
        if not self.n:
            return None
        return Summary(self.mean, (self.m2 / self.n) ** 0.5, self.lo, self.hi)

    def to_dict(self) -> dict[str, float | None]:
        """``mean``, ``std`` (population), ``min``, ``max``; ``None`` without values."""
        s = self.summary()
        if s is None:
            return {"mean": None, "std": None, "min": None, "max": None}
        return s._asdict()


@dataclass
class FieldStats:
    """What is known of one field after the samples added so far."""

    samples: int = 0
    dtype: str = ""
    values: Moments = field(default_factory=Moments)
    nan: int = 0
    inf: int = 0
    nonfinite_samples: int = 0
    nan_samples: int = 0
    inf_samples: int = 0
    shapes: set[tuple[int, ...]] = field(default_factory=set)
    lengths: list[int] = field(default_factory=list)
    channels: list[Moments] | None = None
    channel_dim: int | None = None

    def add_batch(self, batch: torch.Tensor) -> None:
        """Samples of one shape stacked on a first dimension."""
        if batch.shape[0] == 0:
            return
        self.samples += batch.shape[0]
        self.dtype = str(batch.dtype).removeprefix("torch.")
        shape = tuple(batch.shape[1:])
        self.shapes.add(shape)
        if shape:
            self.lengths.extend([shape[0]] * batch.shape[0])
        if batch.dtype == torch.bool:
            batch = batch.to(torch.uint8)
        if not (batch.is_floating_point() or batch.is_complex()):
            self.values.add(batch)
            return
        if batch.is_complex():
            batch = batch.abs()
        finite = torch.isfinite(batch)
        if bool(finite.all()):  # the usual case: no mask to apply, no copy
            self.values.add(batch)
            self._add_channels(batch, None, shape)
            return
        nan, inf = torch.isnan(batch), torch.isinf(batch)
        self.nan += int(nan.sum())
        self.inf += int(inf.sum())
        self.nan_samples += _samples_with(nan)
        self.inf_samples += _samples_with(inf)
        self.nonfinite_samples += _samples_with(nan | inf)
        self.values.add(batch[finite])
        self._add_channels(batch, finite, shape)

    def add(self, sample: torch.Tensor) -> None:
        """One sample."""
        self.add_batch(sample.unsqueeze(0))

    def _add_channels(self, batch: torch.Tensor, finite: torch.Tensor | None, shape: tuple) -> None:
        dim = channel_dim(shape)
        if dim is None or (self.channel_dim is not None and dim != self.channel_dim):
            return
        if self.channels is None:
            self.channels, self.channel_dim = [Moments() for _ in range(shape[dim])], dim
        if len(self.channels) != shape[dim]:
            return
        for c, moments in enumerate(self.channels):
            values = batch.select(dim + 1, c)
            moments.add(values if finite is None else values[finite.select(dim + 1, c)])

    def to_dict(self) -> dict[str, Any]:
        """The statistics as plain JSON values."""
        out: dict[str, Any] = {"dtype": self.dtype, "samples": self.samples}
        if len(self.shapes) == 1:
            out["shape"] = list(next(iter(self.shapes)))
        else:
            out["shape"] = None
            out["shapes"] = len(self.shapes)
        out.update(self.values.to_dict())
        out.update(nan=self.nan, inf=self.inf, nonfinite_samples=self.nonfinite_samples,
                   nan_samples=self.nan_samples, inf_samples=self.inf_samples)  # fmt: skip
        if self.channels is not None:
            out["channels"] = [m.to_dict() for m in self.channels]
        if self.variable_length:
            out["lengths"] = {"min": min(self.lengths), "median": statistics.median(self.lengths),
                              "max": max(self.lengths)}  # fmt: skip
        return out

    @property
    def variable_length(self) -> bool:
        """Samples of this field differ in shape and their lengths are known."""
        return len(self.shapes) > 1 and len(self.lengths) == self.samples


def _samples_with(mask: torch.Tensor) -> int:
    """How many samples (rows of ``mask``) have a True anywhere."""
    return int(mask.flatten(1).any(1).sum()) if mask.ndim > 1 else int(mask.sum())


def channel_dim(shape: tuple[int, ...]) -> int | None:
    """The channel dimension of an image sample: ``(C, H, W)``, ``(C, D, H, W)`` or
    ``(H, W, C)``; ``None`` for other shapes."""
    if len(shape) not in (3, 4):
        return None
    if shape[0] <= MAX_CHANNELS and min(shape[1:]) > MAX_CHANNELS:
        return 0
    if len(shape) == 3 and shape[-1] <= MAX_CHANNELS and min(shape[:-1]) > MAX_CHANNELS:
        return 2
    return None
