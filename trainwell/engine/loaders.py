"""The run's DataLoaders: the resumable training order, the global-batch split, evaluation.

The engine's own training loader draws each epoch's order from (seed, epoch) alone
(:class:`ResumableSampler`), so a run resumed mid-epoch skips exactly the samples the
checkpoint had consumed, and splits ``data.batch_size`` (the global batch per optimizer
step) over processes and accumulation micro-steps. An ``IterableDataset`` streams in
micro-batches of that size; a resumed epoch skips the batches already seen. A
``DataLoader`` the user built is used as it is.

Example:
    >>> from torch.utils.data import TensorDataset
    >>> from trainwell.engine.distributed import Placement
    >>> ds = TensorDataset(torch.arange(10.0), torch.arange(10))
    >>> data = TrainData.build(ds, LoaderSettings(batch_size=4), Placement(torch.device("cpu")))
    >>> data.steps_per_epoch, [len(step) for step in data.epoch(0)]
    (2, [1, 1])
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, IterableDataset

from trainwell.data import length_of
from trainwell.engine.distributed import Placement, ShardSampler
from trainwell.engine.seeding import epoch_seed, seed_worker
from trainwell.errors import UserError


@dataclass
class LoaderSettings:
    """What the loaders need from the config (``data.*``, ``train.grad_accum_steps``, seed)."""

    batch_size: int
    eval_batch_size: int = 256
    grad_accum_steps: int = 1
    num_workers: int = 0
    pin_memory: bool = True
    # Used only with workers; the defaults are PyTorch's own (prefetch 2), workers kept.
    persistent_workers: bool = True
    prefetch_factor: int | None = None
    seed: int = 0
    collate: Callable[[list[Any]], Any] | None = None


class ResumableSampler(DistributedSampler):
    """PyTorch's DistributedSampler, whose epoch can start part-way through.

    The order of an epoch is drawn from (seed, epoch) alone, also with one process, so a
    run resumed mid-epoch skips exactly the samples the checkpoint had consumed.

    Example:
        >>> s = ResumableSampler(range(8), num_replicas=1, rank=0, seed=0)
        >>> s.set_epoch(0, skip_samples=6)
        >>> len(list(s)) == len(s) == 2
        True
    """

    skip_samples = 0

    def set_epoch(self, epoch: int, skip_samples: int = 0) -> None:
        super().set_epoch(epoch)
        self.skip_samples = skip_samples

    def __iter__(self) -> Iterator[int]:
        return itertools.islice(super().__iter__(), self.skip_samples, None)

    def __len__(self) -> int:
        return super().__len__() - self.skip_samples


def micro_batch_size(batch_size: int, accum: int, place: Placement) -> int:
    """Samples per process per micro-step: the global batch split evenly, or an error."""
    parts = place.world_size * accum
    if batch_size % parts:
        raise UserError(
            f"data.batch_size: {batch_size} does not split into {place.world_size} "
            f"processes x {accum} accumulation steps"
        )
    return batch_size // parts


@dataclass
class TrainData:
    """The training loader and how to walk it, epoch by epoch, in optimizer steps.

    Attributes:
        loader: the DataLoader.
        accum: micro-batches per optimizer step.
        micro_batch: samples per micro-batch (``None`` for a user's DataLoader).
        steps_per_epoch: optimizer steps in an epoch (``None``: unknown, an iterable).
        sampler, generator: the engine's resumable order (``None`` for a user's loader).
    """

    loader: DataLoader
    accum: int
    micro_batch: int | None
    steps_per_epoch: int | None
    sampler: ResumableSampler | None = None
    generator: torch.Generator | None = None
    seed: int = 0

    @classmethod
    def build(cls, data: Any, settings: LoaderSettings, place: Placement) -> TrainData:
        """The engine's loader for a ``Dataset``/``IterableDataset``; a ``DataLoader`` as is."""
        accum = settings.grad_accum_steps
        if isinstance(data, DataLoader):
            steps = length_of(data)
            return cls(data, accum, None, None if steps is None else _steps(steps, accum, data))
        micro = micro_batch_size(settings.batch_size, accum, place)
        generator = torch.Generator()
        workers = settings.num_workers
        common = dict(
            batch_size=micro,
            num_workers=workers,
            collate_fn=settings.collate,
            pin_memory=settings.pin_memory and place.device.type == "cuda",
            worker_init_fn=seed_worker if workers else None,
            generator=generator,
            persistent_workers=workers > 0 and settings.persistent_workers,
            prefetch_factor=settings.prefetch_factor if workers else None,
            drop_last=True,
        )
        if isinstance(data, IterableDataset):
            loader = DataLoader(data, **common)
            return cls(loader, accum, micro, None, None, generator, settings.seed)
        sampler = ResumableSampler(data, num_replicas=place.world_size, rank=place.rank,
                                   shuffle=True, seed=settings.seed, drop_last=True)  # fmt: skip
        loader = DataLoader(data, sampler=sampler, **common)
        steps = _steps(len(loader), accum, loader)
        return cls(loader, accum, micro, steps, sampler, generator, settings.seed)

    @property
    def owned(self) -> bool:
        """The engine built the loader: exact resume and the global-batch split hold."""
        return self.micro_batch is not None

    def epoch(self, epoch: int, skip_steps: int = 0) -> Iterator[list[Any]]:
        """The micro-batches of each optimizer step of ``epoch``, after ``skip_steps`` steps.

        The order is a function of (seed, epoch): the sampler's permutation and the
        workers' seeds are set from them before the loader is iterated.
        """
        skip_batches = skip_steps * self.accum
        if self.sampler is not None:
            self.sampler.set_epoch(epoch, skip_samples=skip_batches * (self.micro_batch or 0))
            skip_batches = 0
        else:
            _set_epoch(self.loader, epoch)
        if self.generator is not None:
            self.generator.manual_seed(epoch_seed(self.seed, epoch))
        batches = iter(self.loader)
        # An iterable or a user's loader cannot seek: draw the batches already trained on.
        for _ in itertools.islice(batches, skip_batches):
            pass
        left = None if self.steps_per_epoch is None else self.steps_per_epoch - skip_steps
        for _ in itertools.count() if left is None else range(left):
            step = list(itertools.islice(batches, self.accum))
            if len(step) < self.accum:  # the end of an iterable: no partial step
                return
            yield step


def _steps(batches: int, accum: int, loader: DataLoader) -> int:
    steps = batches // accum
    if steps == 0:
        size = length_of(loader.dataset)
        raise UserError(
            f"data.batch_size: {loader.batch_size} per micro-step x {accum} accumulation steps "
            f"is larger than the training data ({size} samples); incomplete batches are "
            "dropped, so no step would run"
        )
    return steps


def _set_epoch(loader: DataLoader, epoch: int) -> None:
    # A user's DistributedSampler, or an iterable that shuffles by epoch, needs the epoch.
    for owner in (loader.sampler, getattr(loader, "batch_sampler", None), loader.dataset):
        set_epoch = getattr(owner, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(epoch)


def eval_loader(data: Any, settings: LoaderSettings, place: Placement) -> DataLoader | None:
    """A loader for evaluation that gives each rank a disjoint shard (every sample once)."""
    if data is None or isinstance(data, DataLoader):
        return data
    workers = settings.num_workers
    if isinstance(data, IterableDataset):
        sampler = None
    else:
        sampler = ShardSampler(len(data), place.rank, place.world_size)  # type: ignore[arg-type]
    return DataLoader(
        data,
        batch_size=settings.eval_batch_size,
        sampler=sampler,
        collate_fn=settings.collate,
        num_workers=workers,
        pin_memory=settings.pin_memory and place.device.type == "cuda",
        worker_init_fn=seed_worker if workers else None,
        # Its own generator: without one, every iteration draws a worker seed from the
        # global torch RNG, shifting the dropout masks of the training that follows
        # (and differently after a resume, which would break exact resumption).
        generator=torch.Generator().manual_seed(settings.seed),
        persistent_workers=workers > 0 and settings.persistent_workers,
        prefetch_factor=settings.prefetch_factor if workers else None,
    )


def first_samples(data: Any, n: int, collate: Callable | None) -> Any:
    """A small batch of the first ``n`` samples, collated as training collates them."""
    from torch.utils.data import default_collate

    if isinstance(data, DataLoader):
        return next(iter(data))
    if isinstance(data, IterableDataset):
        samples = list(itertools.islice(iter(data), n))
    else:
        samples = [data[i] for i in range(min(n, len(data)))]  # type: ignore[arg-type]
    if not samples:
        raise UserError("data: the training data yields no samples")
    return (collate or default_collate)(samples)


def dataset_of(data: Dataset | DataLoader) -> Dataset:
    """The data set behind ``data`` (itself, or a DataLoader's)."""
    return data.dataset if isinstance(data, DataLoader) else data
