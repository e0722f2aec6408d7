"""The ``sorted-labels-no-shuffle`` probe."""

from __future__ import annotations

from typing import Any

import torch

from trainwell.doctor.codes import severity
from trainwell.doctor.events import BatchEvent, Reporter
from trainwell.doctor.findings import Finding

CODE = "sorted-labels-no-shuffle"
LABEL_KEYS = ("label", "labels", "target", "targets", "y")
MAX_CLASSES = 1000


def sorted_runs(labels: Any) -> tuple[int, int] | None:
    """(classes, runs) when ``labels`` (class labels, in dataset order) come in sorted
    blocks: at least two classes, at most two blocks per class, each block at least
    ``4`` long (one stray sample in a block is not sorting); ``None`` otherwise.

    Example:
        >>> sorted_runs([0] * 50 + [1] * 50), sorted_runs([0, 1] * 50)
        ((2, 2), None)
    """
    t = _as_class_labels(labels)
    if t is None or t.numel() < 8:
        return None
    values, counts = torch.unique_consecutive(t, return_counts=True)
    classes = int(torch.unique(values).numel())
    if classes < 2 or len(values) > 2 * classes or int(counts.min()) < 4:
        return None
    return classes, len(values)


def _as_class_labels(labels: Any) -> torch.Tensor | None:
    try:
        t = torch.as_tensor(labels)
    except (TypeError, ValueError, RuntimeError):
        return None
    if t.dim() == 2 and t.shape[1] == 1:
        t = t[:, 0]
    if t.dim() != 1:
        return None
    if t.dtype.is_floating_point:
        # 0./1. targets of a BCE loss are classes; a regression target is not.
        if not bool((t == t.round()).all()) or torch.unique(t).numel() > MAX_CLASSES:
            return None
    elif t.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8,
                         torch.bool):  # fmt: skip
        return None
    return t


def dataset_labels(ds: Any) -> Any:
    """The class labels of a map-style data set in index order, when it keeps them
    itself: a ``TensorDataset``'s last tensor, a ``targets`` / ``labels`` attribute
    (torchvision's ``ImageFolder``, ``MNIST``), through ``Subset``; ``None`` else."""
    from torch.utils.data import Subset, TensorDataset

    if isinstance(ds, Subset):
        inner = dataset_labels(ds.dataset)
        t = _as_class_labels(inner) if inner is not None else None
        return t[torch.as_tensor(list(ds.indices), dtype=torch.long)] if t is not None else None
    if isinstance(ds, TensorDataset):
        return ds.tensors[-1] if len(ds.tensors) >= 2 else None
    for name in ("targets", "labels"):
        value = getattr(ds, name, None)
        try:
            if value is not None and len(value) == len(ds):
                return value
        except TypeError:
            continue
    return None


def batch_labels(batch: Any) -> torch.Tensor | None:
    """The class labels of a batch: ``(inputs, labels)`` (the last item, as long as the
    first) or a dict's ``label``/``labels``/``target``/``y`` entry."""
    if isinstance(batch, dict):
        found = next((batch[k] for k in LABEL_KEYS if k in batch), None)
    elif isinstance(batch, (list, tuple)) and len(batch) >= 2:
        found = batch[-1]
        first = batch[0]
        if not (isinstance(first, torch.Tensor) and isinstance(found, torch.Tensor)
                and first.dim() and found.dim() and len(first) == len(found)):  # fmt: skip
            return None
    else:
        return None
    return _as_class_labels(found) if isinstance(found, torch.Tensor) else None


def _item_label(item: Any) -> Any:
    if isinstance(item, dict):
        return next((item[k] for k in LABEL_KEYS if k in item), None)
    if isinstance(item, (list, tuple)) and len(item) >= 2:
        return item[-1]
    return None


class _Reading:
    """A sequential pass over one data set, watched for a sorted order."""

    __slots__ = ("dataset", "steps", "verdict", "first", "samples", "batches", "site")

    def __init__(self, dataset: Any, steps: int, verdict: tuple[int, int] | None) -> None:
        self.dataset, self.steps, self.verdict = dataset, steps, verdict
        self.first: Any = None  # the one label of every batch so far (batch path)
        self.samples = self.batches = 0
        self.site: Any = None


class SortedLabelsNoShuffleProbe:
    """``sorted-labels-no-shuffle``: a DataLoader reads its data set in order (no
    ``shuffle=True``, no sampler) while the labels come in sorted blocks (all the 0s,
    then all the 1s), and its batches train (an optimizer steps between two of them:
    an evaluation loader's order does not matter).

    The labels are read from the data set when it keeps them (a ``TensorDataset``,
    ``targets``); otherwise from the batches: the first ones all one class over at
    least ``MIN_SAMPLES`` samples, while the data set's last item is of another.
    """

    MIN_SAMPLES = 32
    MIN_BATCHES = 3
    WATCH = 64  # batches of a pass watched at most

    def __init__(self) -> None:
        self.reading: dict[int, _Reading] = {}  # id(iterator) -> its pass
        self.verdicts: dict[int, tuple[int, int] | tuple[()] | None] = {}  # id(dataset) ->
        self.reported: set[int] = set()

    def on_batch(self, doc: Reporter, event: BatchEvent) -> None:
        it = event.loader
        if event.index == 1:
            self.reading.pop(id(it), None)
            self._start(doc, event)
        reading = self.reading.get(id(it)) if self.reading else None
        if reading is None:
            return
        if event.index > self.WATCH:
            del self.reading[id(it)]
            return
        if reading.verdict is None and not self._from_batches(doc, reading, event):
            return
        if reading.verdict and doc.steps > reading.steps:
            del self.reading[id(it)]
            self._report(doc, reading, event)

    def _start(self, doc: Reporter, event: BatchEvent) -> None:
        from torch.utils.data import SequentialSampler

        it = event.loader
        sampler = getattr(it, "_index_sampler", None)
        sampler = getattr(sampler, "sampler", sampler)
        ds = it._dataset
        if type(sampler) is not SequentialSampler or id(ds) in self.reported:
            return
        if id(ds) in self.verdicts:
            verdict = self.verdicts[id(ds)]
        else:
            labels = dataset_labels(ds)
            runs = sorted_runs(labels) if labels is not None else None
            verdict = self.verdicts[id(ds)] = runs if (runs or labels is None) else ()
        if verdict is not None and len(verdict) != 2:
            return  # its labels are known, and not sorted
        self.reading[id(it)] = _Reading(ds, doc.steps, verdict)

    def _from_batches(self, doc: Reporter, reading: _Reading, event: BatchEvent) -> bool:
        """Judge from the batches; whether a verdict was reached (``reading.verdict``)."""
        labels = batch_labels(event.batch)
        it = event.loader
        if labels is None or not labels.numel() or bool((labels != labels[0]).any()):
            del self.reading[id(it)]  # mixed classes in a batch: not sorted
            return False
        first = labels[0].item()
        if reading.first is None:
            reading.first = first
        elif first != reading.first:
            del self.reading[id(it)]
            return False
        reading.samples += labels.numel()
        reading.batches += 1
        if reading.samples < self.MIN_SAMPLES or reading.batches < self.MIN_BATCHES:
            return False
        last = self._last_label(doc, reading.dataset)
        if last is None or last == first:
            del self.reading[id(it)]
            return False
        reading.verdict = (2, 2)  # at least two classes, the first block seen
        return True

    @staticmethod
    def _last_label(doc: Reporter, ds: Any) -> Any:
        try:
            with doc.muted():
                label = _item_label(ds[len(ds) - 1])
        except Exception:  # a data set that cannot be indexed so: not judged
            return None
        if isinstance(label, torch.Tensor):
            return label.item() if label.numel() == 1 else None
        return label if isinstance(label, (int, float, bool)) else None

    def _report(self, doc: Reporter, reading: _Reading, event: BatchEvent) -> None:
        ds = reading.dataset
        self.reported.add(id(ds))
        site = doc.loader_sites.get(id(ds)) or event.site
        if site is None or reading.verdict is None:
            return
        loop = event.site
        related = ([{"file": loop.file, "line": loop.line, "what": "the training loop"}]
                   if loop is not None and loop != site else [])  # fmt: skip
        classes, runs = reading.verdict
        blocks = (f"{classes} classes in {runs} sorted blocks" if reading.first is None
                  else f"the first {reading.samples} samples all of class {reading.first}, "
                  "the last of another")  # fmt: skip
        doc.add(
            Finding(
                code=CODE,
                severity=severity(CODE),
                file=site.file,
                line=site.line,
                message=f"this DataLoader reads a training set sorted by label in order "
                f"({blocks}): each stretch of training sees one class",
                why="without shuffling, the model is trained on one class for many steps, "
                "then on the next: it forgets the first, and the loss and batch-norm "
                "statistics swing with the class; the result depends on the order",
                fix="pass shuffle=True to this DataLoader (or a sampler: RandomSampler, "
                "DistributedSampler(shuffle=True)); keep the evaluation loaders unshuffled",
                related=related,
                evidence={"dataset": type(ds).__name__, "classes": classes, "blocks": runs},
            )
        )
