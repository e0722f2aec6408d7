"""Read one split: its size, its fields' statistics, its labels, its first batch.

At most ``max_samples`` samples are read (drawn evenly with a fixed seed when the split is
bigger, so sorted data sets are not judged by their first class), and reading stops at a
deadline; the report says how many were read. Labels that a data set exposes without
loading the inputs (``.targets``, a ``TensorDataset``'s second tensor) are counted in full.
Tensor data sets are read a slice at a time instead of sample by sample.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset, Subset, TensorDataset

from trainwell.data import length_of, targets_of
from trainwell.datacheck.fields import is_class_label, split_fields
from trainwell.datacheck.labels import count_labels
from trainwell.datacheck.stats import FieldStats, channel_dim
from trainwell.engine.loading.loaders import first_samples
from trainwell.errors import UserError

# Samples stacked per statistics update, and per slice of a tensor data set.
CHUNK = 256
SLICE = 4096
# Images kept per class (and in all) for the sample grid.
GRID_PER_CLASS = 8
GRID_MAX = 80


@dataclass
class SplitReport:
    """What was learned about one split."""

    name: str
    size: int | None
    read: int = 0
    stopped: str | None = None  # "limit" (max_samples) or "time" (the deadline)
    inputs: dict[str, FieldStats] = field(default_factory=dict)
    target_name: str | None = None
    classes: Counter | None = None  # class labels: their counts
    labels_complete: bool = False  # counted over the whole split, not the samples read
    targets: FieldStats | None = None  # other targets (regression, sequences): statistics
    first_batch: Any = None
    batch_error: str | None = None
    images: list[tuple[torch.Tensor, int | None]] = field(default_factory=list)
    # A digest of each sample's inputs read: duplicates, and samples shared between splits.
    digests: Counter = field(default_factory=Counter)

    @property
    def main_input(self) -> str | None:
        """The input the summary speaks of: ``input``, else the first field."""
        return "input" if "input" in self.inputs else next(iter(self.inputs), None)


def read_split(
    name: str,
    data: Any,
    collate: Callable | None,
    batch_size: int,
    max_samples: int,
    deadline: float,
) -> SplitReport:
    """Read the split ``data`` (a Dataset, an IterableDataset or a DataLoader)."""
    ds = data.dataset if isinstance(data, DataLoader) else data
    report = SplitReport(name, length_of(ds))
    targets = targets_of(ds) if not isinstance(ds, IterableDataset) else None
    if targets is not None and is_class_label(targets, batched=True):
        report.classes, report.labels_complete = Counter(count_labels(targets)), True
    acc = _Accumulator(report)
    columns = _tensor_base(ds)
    if columns is not None and report.size is not None:
        _read_tensors(acc, columns, _indices(ds, report.size, max_samples), deadline)
    else:
        at = [0]  # the index being read, for the message if reading it fails
        _read_samples(acc, name, ds, _samples(ds, report.size, max_samples, at), at, deadline)
    acc.flush()
    if report.size is not None and report.read < report.size:
        report.stopped = report.stopped or "limit"
    _first_batch(report, data, collate, batch_size)
    return report


def _indices(ds: Any, size: int, max_samples: int) -> torch.Tensor:
    if size <= max_samples:
        return torch.arange(size)
    # Evenly over the split with a fixed seed: a label-sorted set is not judged by its head.
    chosen = torch.randperm(size, generator=torch.Generator().manual_seed(0))[:max_samples]
    return chosen.sort().values


def _samples(ds: Any, size: int | None, max_samples: int, at: list[int]) -> Iterator[Any]:
    if size is None or not hasattr(ds, "__getitem__"):
        for i, sample in enumerate(itertools.islice(iter(ds), max_samples)):
            yield sample
            at[0] = i + 1
        return
    for i in _indices(ds, size, max_samples).tolist():
        at[0] = i
        yield ds[i]


def _tensor_base(ds: Any) -> tuple[tuple[torch.Tensor, ...], Callable] | None:
    """``(tensors, index map)`` when ``ds`` is a TensorDataset, possibly under Subsets."""
    maps = []
    while isinstance(ds, Subset):
        maps.append(torch.as_tensor(ds.indices, dtype=torch.long))
        ds = ds.dataset
    # A subclass with its own __getitem__ transforms its samples: read those one by one.
    if not isinstance(ds, TensorDataset) or type(ds).__getitem__ is not TensorDataset.__getitem__:
        return None

    def to_base(idx: torch.Tensor) -> torch.Tensor:
        for m in maps:
            idx = m[idx]
        return idx

    return ds.tensors, to_base


def _read_tensors(acc: _Accumulator, columns: tuple, idx: torch.Tensor, deadline: float) -> None:
    tensors, to_base = columns
    for start in range(0, len(idx), SLICE):
        if time.monotonic() > deadline:
            acc.report.stopped = "time"
            return
        base = to_base(idx[start : start + SLICE])
        acc.add_columns(tuple(t[base] for t in tensors))


def _read_samples(
    acc: _Accumulator, split: str, ds: Any, samples: Iterator[Any], at: list[int], deadline: float
) -> None:
    try:
        for sample in samples:
            acc.add_sample(sample)
            if time.monotonic() > deadline:
                acc.report.stopped = "time"
                return
    except UserError:
        raise
    except Exception as exc:  # the user's data set failed: one line, not a traceback
        i = at[0]
        raise UserError(
            f"data: cannot read sample {i} of the {split} split{_where(ds, i)}: "
            f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        ) from exc


def _where(ds: Any, i: int) -> str:
    """`` (index 13 of BadRow)`` for a split carved out of a data set by Subsets."""
    if not isinstance(ds, Subset) or i >= len(ds):
        return ""
    while isinstance(ds, Subset):
        i, ds = int(ds.indices[i]), ds.dataset
    return f" (index {i} of {type(ds).__name__})"


class _Accumulator:
    """Buffers samples by field and shape, and folds them into the report's statistics."""

    def __init__(self, report: SplitReport) -> None:
        self.report = report
        self.pending: dict[str, list[torch.Tensor]] = {}
        self.is_class: bool | None = None

    def add_sample(self, sample: Any) -> None:
        inputs, target_name, target = split_fields(sample)
        self._target(target_name, target, batched=False)
        for name, tensor in inputs.items():
            self.pending.setdefault(name, []).append(tensor)
        self._keep_image(inputs, target)
        self.report.digests[_digest(inputs.values())] += 1
        self.report.read += 1
        if self.report.read % CHUNK == 0:
            self.flush()

    def add_columns(self, columns: tuple[torch.Tensor, ...]) -> None:
        inputs, target_name, target = split_fields(columns)
        self._target(target_name, target, batched=True)
        for name, batch in inputs.items():
            self.report.inputs.setdefault(name, FieldStats()).add_batch(batch)
        main = "input" if "input" in inputs else next(iter(inputs), None)
        if main is not None and _is_image(inputs[main][0]):
            for k in range(len(columns[0])):
                if len(self.report.images) >= GRID_MAX:
                    break
                self._keep_image({main: inputs[main][k]}, None if target is None else target[k])
        for k in range(len(columns[0])):
            self.report.digests[_digest(b[k] for b in inputs.values())] += 1
        self.report.read += len(columns[0])

    def flush(self) -> None:
        for name, tensors in self.pending.items():
            stats = self.report.inputs.setdefault(name, FieldStats())
            for group in _by_shape(tensors):
                stats.add_batch(torch.stack(group))
        self.pending = {}

    def _target(self, name: str | None, target: torch.Tensor | None, batched: bool) -> None:
        report = self.report
        if target is None:
            return
        report.target_name = name
        if self.is_class is None:
            self.is_class = is_class_label(target, batched)
        if self.is_class:
            if report.classes is None:
                report.classes = Counter()
            if not report.labels_complete:
                report.classes.update(count_labels(target))
            return
        stats = report.targets = report.targets or FieldStats()
        stats.add_batch(target if batched else target.unsqueeze(0))

    def _keep_image(self, inputs: dict[str, torch.Tensor], target: Any) -> None:
        name = "input" if "input" in inputs else next(iter(inputs), None)
        image = inputs.get(name) if name else None
        if image is None or not _is_image(image) or len(self.report.images) >= GRID_MAX:
            return
        label = int(target) if self.is_class and target is not None else None
        if sum(1 for _, lab in self.report.images if lab == label) < GRID_PER_CLASS:
            self.report.images.append((image.detach().float(), label))


def _digest(tensors: Any) -> int:
    """Equal for samples whose inputs are equal (shape, dtype and bytes)."""
    return hash(tuple(
        (tuple(t.shape), t.dtype, t.detach().cpu().contiguous().view(-1).view(torch.uint8)
         .numpy().tobytes())
        for t in tensors
    ))  # fmt: skip


def _is_image(t: torch.Tensor) -> bool:
    if t.ndim == 2:
        return min(t.shape) > 4
    dim = channel_dim(tuple(t.shape))
    return t.ndim == 3 and dim is not None and t.shape[dim] in (1, 3, 4)


def _by_shape(tensors: list[torch.Tensor]) -> list[list[torch.Tensor]]:
    groups: dict[tuple, list[torch.Tensor]] = {}
    for t in tensors:
        groups.setdefault((tuple(t.shape), t.dtype), []).append(t)
    return list(groups.values())


def _first_batch(report: SplitReport, data: Any, collate: Callable | None, size: int) -> None:
    try:
        report.first_batch = first_samples(data, size, collate)
    except Exception as exc:  # a collate that fails is a finding about the data, not a crash
        report.batch_error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
