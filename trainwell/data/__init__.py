"""Data sets and loaders: the built-in data sets, user data by import path, and the config.

``data.name`` is a built-in name (``digits``, ``fashion_mnist``, ``synthetic``) or an import
path ``package.module:attr`` to a callable (a ``Dataset`` class or a function) that
returns either one ``Dataset`` (a validation split of ``data.val_fraction`` is carved out
of it, with a fixed seed) or ``(train, val)`` / ``(train, val, test)`` or a dict with
those keys. The callable may also return ``IterableDataset``s, or ``DataLoader``s it
built itself (used as they are). Samples may have any shape: ``(input, target)`` pairs
train with the loss alone; other shapes (dicts, several inputs) with a step function.

Example:
    >>> splits = build_data(DataConfig(name="synthetic", kwargs={"num_samples": 64}))
    >>> len(splits.train), splits.num_classes
    (58, 10)
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, Subset, TensorDataset

from trainwell._options import check, check_int, check_number, option
from trainwell.errors import UserError
from trainwell.imports import call_with, is_import_path, parse_spec, resolve

BUILTIN_DATA = ("digits", "fashion_mnist", "synthetic")
MAX_WORKERS = 1024
# Batches in flight per worker; beyond this the host memory goes, not the speed.
MAX_PREFETCH = 1024


@dataclass
class DataConfig:
    """What to train on and how to load it."""

    name: str = option(
        "digits",
        "built-in data set (digits, fashion_mnist, synthetic) or import path "
        "'package.module:attr' of a callable returning Dataset(s)",
    )
    batch_size: int = option(
        64, "global batch per optimizer step, split over processes and accumulation micro-steps"
    )
    eval_batch_size: int = option(256, "batch size per process for evaluation")
    num_workers: int = option(0, "DataLoader worker processes (0 loads in the main process)")
    pin_memory: bool = option(True, "pin host memory for faster copies (used only with CUDA)")
    persistent_workers: bool = option(
        True, "keep the worker processes alive between epochs (used only with num_workers > 0)"
    )
    prefetch_factor: int | None = option(
        None,
        "batches each worker loads ahead (used only with num_workers > 0); "
        "null: PyTorch's default, 2",
    )
    root: str = option("data/fashion_mnist", "folder of files for data sets read from disk")
    val_fraction: float = option(
        0.1, "share of the training data held out for validation when a data set has no val split"
    )
    num_classes: int | None = option(
        None, "number of classes, when a user data set does not say (built-ins know it)"
    )
    kwargs: dict[str, Any] = option({}, "keyword arguments for the data set's callable")
    collate: Any = option(
        "",
        "collate_fn (padding variable-length samples): import path 'package.module:fn' or "
        "{name: PATH, kwargs: {...}} (a function gets the kwargs after the samples; a class "
        "with __call__ is built with them)",
    )
    sampler: Any = option(
        "",
        "import path of a factory called with the training data set that returns a Sampler "
        "of indices (class balancing), or {name: PATH, kwargs: {...}}; drawn from run.seed "
        "each epoch and sharded over the processes",
    )
    batch_sampler: Any = option(
        "",
        "import path of a factory called with the training data set that returns a batch "
        "sampler (lists of indices; length buckets), or {name: PATH, kwargs: {...}}; each "
        "batch is one micro-batch of one process (data.batch_size is then not used)",
    )

    def __post_init__(self) -> None:
        check_int(self.batch_size, "data.batch_size")
        check_int(self.eval_batch_size, "data.eval_batch_size")
        # More workers than this is a typo; each one is a process with its own copy.
        check_int(self.num_workers, "data.num_workers", low=0, high=MAX_WORKERS)
        if self.prefetch_factor is not None:
            check_int(self.prefetch_factor, "data.prefetch_factor", high=MAX_PREFETCH)
        check_number(self.val_fraction, "data.val_fraction", 0, 1, low_open=True, high_open=True)
        if self.num_classes is not None:
            check_int(self.num_classes, "data.num_classes")
        check(
            self.name in BUILTIN_DATA or is_import_path(self.name),
            "data.name",
            f"unknown data set {self.name!r}; built-in: {', '.join(BUILTIN_DATA)}, "
            "or an import path 'package.module:attr'",
        )
        for key in ("collate", "sampler", "batch_sampler"):
            _check_spec(getattr(self, key), f"data.{key}")
        check(
            not (self.sampler and self.batch_sampler),
            "data.sampler",
            "data.sampler and data.batch_sampler are both set; a batch sampler draws its own "
            "indices (give it the sampler inside the factory)",
        )


def _check_spec(spec: Any, key: str) -> None:
    """An import path, or ``{name: PATH, kwargs}``; empty is unset."""
    if spec is None or spec == "":
        return
    path, _ = parse_spec(spec, key)
    check(is_import_path(path), key, f"{path!r} is not an import path 'package.module:fn'")


def build_collate(spec: Any) -> Callable[[list[Any]], Any] | None:
    """The ``collate_fn`` that ``data.collate`` names, with its kwargs; ``None`` if unset.

    A function gets the kwargs after the samples (``fn(samples, **kwargs)``); a class
    whose instances are callable is built with them and its instance collates.

    Example:
        >>> fn = build_collate({"name": "torch.nn.utils.rnn:pad_sequence",
        ...                     "kwargs": {"batch_first": True, "padding_value": -1.0}})
        >>> fn([torch.ones(1), torch.ones(2)]).tolist()
        [[1.0, -1.0], [1.0, 1.0]]
    """
    if not spec:
        return None
    path, kwargs = parse_spec(spec, "data.collate")
    fn = resolve(path, "data.collate")
    if isinstance(fn, type) and any("__call__" in vars(k) for k in fn.__mro__[:-1]):
        return call_with(fn, kwargs, {}, "data.collate")
    if not callable(fn):
        raise UserError(f"data.collate: {path!r} is a {type(fn).__name__}, not a function")
    if not kwargs:
        return fn
    try:
        inspect.signature(fn).bind([], **kwargs)
    except TypeError as exc:
        raise UserError(f"data.collate: cannot call {path} with the kwargs: {exc}") from None
    except ValueError:
        pass  # no signature to check (a builtin): the first batch will tell
    return functools.partial(fn, **kwargs)


@dataclass
class DataSplits:
    """The data sets of a run and what the model needs to know about them."""

    train: Dataset | DataLoader
    val: Dataset | DataLoader | None
    test: Dataset | DataLoader | None
    num_classes: int | None
    input_shape: tuple[int, ...] | None
    # The first training sample (read once, for the input shape and the collate's choice).
    sample: Any = None


def build_data(
    cfg: DataConfig, check_targets: bool = True, ignore_index: int | None = None
) -> DataSplits:
    """Build the configured data set's splits and check that they are usable.

    With ``check_targets``, class targets outside a known number of classes are refused
    (a loss's ``ignore_index`` excepted); a user's step function is trusted instead.
    """
    if cfg.name == "digits":
        from trainwell.data.digits import load_digits_splits

        train, val, test = load_digits_splits()
        num_classes: int | None = 10
    elif cfg.name == "fashion_mnist":
        from trainwell.data.idx import load_fashion_mnist

        train, val, test = load_fashion_mnist(cfg.root, val_fraction=cfg.val_fraction)
        num_classes = 10
    elif cfg.name == "synthetic":
        from trainwell.data.synthetic import make_synthetic

        kwargs = dict(cfg.kwargs)
        dataset = call_with(make_synthetic, kwargs, {}, "data.kwargs")
        num_classes = dataset.num_classes
        train, val = split_off(dataset, cfg.val_fraction)
        test = None
    else:
        train, val, test = _user_splits(cfg)
        num_classes = None
    num_classes = cfg.num_classes or num_classes
    if num_classes is not None and check_targets:
        for split, ds in (("train", train), ("val", val), ("test", test)):
            check_labels(ds, num_classes, split, ignore_index)
    return make_splits(train, val, test, num_classes, f"{cfg.name!r}")


def make_splits(
    train: Any, val: Any, test: Any, num_classes: int | None, name: str = "train_data"
) -> DataSplits:
    """Check the splits are not empty; learn the input shape and, from integer targets the
    data sets expose, the number of classes."""
    for split, ds in (("train", train), ("val", val), ("test", test)):
        if ds is not None and length_of(ds) == 0:
            raise UserError(f"data.name: the {split} split of {name} is empty")
    if num_classes is None:
        num_classes = infer_num_classes(train, val, test)
    sample = first_sample(train)
    return DataSplits(train, val, test, num_classes, _input_shape(sample), sample)


def infer_num_classes(*datasets: Any) -> int | None:
    """1 + the largest class target the splits expose (``.targets``, a TensorDataset's
    second tensor); ``None`` unless the training split exposes integer targets.

    Example:
        >>> ds = TensorDataset(torch.zeros(3, 2), torch.tensor([0, 4, 1]))
        >>> infer_num_classes(ds, None)
        5
    """
    found = [t for t in (targets_of(ds) for ds in datasets if ds is not None) if t is not None]
    if targets_of(datasets[0]) is None or not all(_is_int(t) for t in found):
        return None
    highest = [int(t.max()) for t in found if t.numel()]
    return max(highest) + 1 if highest else None


def _is_int(t: torch.Tensor) -> bool:
    return not (t.is_floating_point() or t.is_complex() or t.dtype == torch.bool) and t.ndim == 1


def length_of(ds: Any) -> int | None:
    """``len(ds)``, or ``None`` for what has no length (an IterableDataset, a stream)."""
    try:
        return len(ds)
    except TypeError:  # an IterableDataset without __len__
        return None


def first_sample(data: Any) -> Any:
    """The first sample of a data set (of a DataLoader: its first batch)."""
    if isinstance(data, DataLoader):
        return next(iter(data))
    if isinstance(data, IterableDataset):
        for sample in data:
            return sample
        raise UserError("data.name: the train split yields no samples")
    return data[0]


def _input_shape(sample: Any) -> tuple[int, ...] | None:
    # The input of an (input, target) pair, else the first tensor met (dict samples).
    first = sample[0] if isinstance(sample, (tuple, list)) and sample else sample
    while isinstance(first, (tuple, list)) and first:
        first = first[0]
    if isinstance(first, dict):
        first = next(iter(first.values()), None)
    try:
        return tuple(torch.as_tensor(first).shape)
    except (TypeError, ValueError, RuntimeError):
        return None


def _user_splits(cfg: DataConfig) -> tuple[Dataset, Dataset | None, Dataset | None]:
    factory = resolve(cfg.name, "data.name")
    out = call_with(factory, dict(cfg.kwargs), {}, "data.kwargs")
    if isinstance(out, Mapping):
        unknown = set(out) - {"train", "val", "test"}
        if "train" not in out or unknown:
            raise UserError(
                f"data.name: {cfg.name!r} returned a dict with keys {sorted(out)}; "
                "expected 'train' and optionally 'val', 'test'"
            )
        return out["train"], out.get("val"), out.get("test")
    if isinstance(out, (tuple, list)) and not _looks_like_sample(out):
        if len(out) not in (2, 3):
            raise UserError(
                f"data.name: {cfg.name!r} returned {len(out)} data sets; expected "
                "(train, val) or (train, val, test)"
            )
        return out[0], out[1], out[2] if len(out) == 3 else None
    if isinstance(out, (IterableDataset, DataLoader)):
        return out, None, None  # nothing to carve a validation split from
    if not hasattr(out, "__getitem__") or not hasattr(out, "__len__"):
        raise UserError(
            f"data.name: {cfg.name!r} returned {type(out).__name__}, not a Dataset, "
            "IterableDataset or DataLoader"
        )
    train, val = split_off(out, cfg.val_fraction)
    return train, val, None


def _looks_like_sample(out: Sequence[Any]) -> bool:
    # A (train, val) pair holds data sets, which have a length; a sample holds tensors.
    def is_data(x: Any) -> bool:
        return isinstance(x, (IterableDataset, DataLoader)) or (
            hasattr(x, "__len__") and hasattr(x, "__getitem__")
        )

    return not all(x is None or is_data(x) for x in out) or any(
        isinstance(x, torch.Tensor) for x in out
    )


def split_off(dataset: Dataset, val_fraction: float, seed: int = 0) -> tuple[Subset, Subset]:
    """Split ``dataset`` into train and validation subsets with a fixed seed.

    The split does not depend on ``run.seed``, so runs with different seeds are compared
    on the same validation data.
    """
    n = len(dataset)  # type: ignore[arg-type]
    n_val = max(1, math.floor(n * val_fraction)) if n > 1 else 0
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    return Subset(dataset, order[n_val:]), Subset(dataset, order[:n_val])


def targets_of(dataset: Dataset | None) -> torch.Tensor | None:
    """All targets of a data set when they can be read without loading the inputs."""
    if isinstance(dataset, Subset):
        inner = targets_of(dataset.dataset)
        return None if inner is None else inner[torch.as_tensor(dataset.indices, dtype=torch.long)]
    if isinstance(dataset, TensorDataset):
        # (input, target) only: in a longer tuple the second tensor may be another input.
        return dataset.tensors[1] if len(dataset.tensors) == 2 else None
    targets = getattr(dataset, "targets", None)
    if targets is None:
        return None
    try:
        return torch.as_tensor(targets)
    except (TypeError, ValueError):
        return None


def check_labels(
    dataset: Dataset | None, num_classes: int, split: str, ignore_index: int | None = None
) -> None:
    """Refuse class targets outside ``[0, num_classes)`` before any training starts.

    A target equal to the loss's ``ignore_index`` (padding) is not out of range.

    Out-of-range targets give a cryptic device-side assert on CUDA and a bare IndexError
    on the CPU, mid-run; here they get one line naming the split and the values.
    """
    targets = targets_of(dataset)
    if targets is None or targets.is_floating_point() or targets.numel() == 0:
        return
    if ignore_index is not None:
        targets = targets[targets != ignore_index]
        if targets.numel() == 0:
            return
    lo, hi = int(targets.min()), int(targets.max())
    if lo < 0 or hi >= num_classes:
        bad = targets[(targets < 0) | (targets >= num_classes)]
        raise UserError(
            f"labels out of range: the {split} split has {bad.numel()} targets outside "
            f"[0, {num_classes}) (min {lo}, max {hi}); fix the labels or set the number of "
            "classes (data.num_classes or the model's num_classes)"
        )
