"""The run's DataLoaders: the resumable training order, the global-batch split, evaluation.

The engine's own training loader draws each epoch's order from (seed, epoch) alone
(:class:`ResumableSampler`, or the user's ``data.sampler`` / ``data.batch_sampler``
drawn and sharded by :mod:`trainwell.engine.loading.samplers`), so a run resumed mid-epoch skips
exactly the samples the checkpoint had consumed, and splits ``data.batch_size`` (the
global batch per optimizer step) over processes and accumulation micro-steps. With a
batch sampler, each of its batches is one micro-batch of one process. An
``IterableDataset`` streams in micro-batches of that size; a resumed epoch skips the
batches already seen. A ``DataLoader`` the user built is used as it is on one process;
on several, its sampler is sharded where it can be rebuilt.

Example:
    >>> from torch.utils.data import TensorDataset
    >>> from trainwell.engine.distributed.placement import Placement
    >>> ds = TensorDataset(torch.arange(10.0), torch.arange(10))
    >>> data = TrainData.build(ds, LoaderSettings(batch_size=4), Placement(torch.device("cpu")))
    >>> data.steps_per_epoch, [len(step) for step in data.epoch(0)]
    (2, [1, 1])
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, IterableDataset

from trainwell.data import DataConfig, DataSplits, build_collate, length_of
from trainwell.engine.distributed.placement import Placement, ShardSampler
from trainwell.engine.loading.batch import collate_for
from trainwell.engine.loading.samplers import (
    ShardedBatchSampler,
    ShardedSampler,
    build_sampler,
    shard_loader,
)
from trainwell.engine.loading.seeding import epoch_seed, seed_worker
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
    # Built by the user's data.sampler / data.batch_sampler factory (at most one of them).
    sampler: Any = None
    batch_sampler: Any = None


class _LoaderOptions(TypedDict):
    """The DataLoader arguments every training loader of :meth:`TrainData.build` shares."""

    num_workers: int
    collate_fn: Callable[[list[Any]], Any] | None
    pin_memory: bool
    worker_init_fn: Callable[[int], None] | None
    generator: torch.Generator
    persistent_workers: bool
    prefetch_factor: int | None


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


def loader_settings(data: DataConfig, accum: int, seed: int, splits: DataSplits) -> LoaderSettings:
    """The loaders' settings from ``data.*``: the collate (the config's, else the one the
    first sample needs) and the user's sampler or batch sampler, built on the training set.
    """
    collate = build_collate(data.collate)
    if collate is None and not isinstance(splits.train, DataLoader):  # a loader collates itself
        collate = collate_for(splits.sample)
    return LoaderSettings(
        batch_size=data.batch_size,
        eval_batch_size=data.eval_batch_size,
        grad_accum_steps=accum,
        num_workers=data.num_workers,
        pin_memory=data.pin_memory,
        persistent_workers=data.persistent_workers,
        prefetch_factor=data.prefetch_factor,
        seed=seed,
        collate=collate,
        sampler=build_sampler(data.sampler, splits.train, "data.sampler"),
        batch_sampler=build_sampler(data.batch_sampler, splits.train, "data.batch_sampler"),
    )


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
        micro_batch: samples per micro-batch (``None`` for a user's DataLoader and for a
            batch sampler, whose batches say it).
        steps_per_epoch: optimizer steps in an epoch (``None``: unknown, an iterable).
        sampler, generator: the engine's resumable order (``None`` for a user's loader).
        batched: ``sampler`` is a batch sampler (its items, the ones skipped included,
            are batches).
        unsharded: why a user's DataLoader on several processes could not be sharded.
    """

    loader: DataLoader
    accum: int
    micro_batch: int | None
    steps_per_epoch: int | None
    sampler: ResumableSampler | ShardedSampler | ShardedBatchSampler | None = None
    generator: torch.Generator | None = None
    seed: int = 0
    batched: bool = False
    unsharded: str | None = None

    @classmethod
    def build(cls, data: Any, settings: LoaderSettings, place: Placement) -> TrainData:
        """The engine's loader for a ``Dataset``/``IterableDataset``; a ``DataLoader`` as
        is on one process, its sampler sharded on several."""
        accum = settings.grad_accum_steps
        if isinstance(data, DataLoader):
            return cls._user_loader(data, settings, place)
        generator = torch.Generator()
        workers = settings.num_workers
        common = _LoaderOptions(
            num_workers=workers,
            collate_fn=settings.collate,
            pin_memory=settings.pin_memory and place.device.type == "cuda",
            worker_init_fn=seed_worker if workers else None,
            generator=generator,
            persistent_workers=workers > 0 and settings.persistent_workers,
            prefetch_factor=settings.prefetch_factor if workers else None,
        )
        if settings.batch_sampler is not None:
            batches = ShardedBatchSampler(
                settings.batch_sampler, place.rank, place.world_size, settings.seed, len(data),
                "data.batch_sampler",
            )
            loader = DataLoader(data, batch_sampler=batches, **common)
            steps = _steps(len(loader), accum, loader, place.world_size)
            return cls(loader, accum, None, steps, batches, generator, settings.seed, batched=True)
        micro = micro_batch_size(settings.batch_size, accum, place)
        if isinstance(data, IterableDataset):
            loader = DataLoader(data, batch_size=micro, drop_last=True, **common)
            return cls(loader, accum, micro, None, None, generator, settings.seed)
        sampler: ResumableSampler | ShardedSampler
        if settings.sampler is not None:
            sampler = ShardedSampler(settings.sampler, place.rank, place.world_size,
                                     settings.seed, len(data), "data.sampler")  # fmt: skip
        else:
            sampler = ResumableSampler(
                data, num_replicas=place.world_size, rank=place.rank, shuffle=True,
                seed=settings.seed, drop_last=True,
            )
        loader = DataLoader(data, batch_size=micro, sampler=sampler, drop_last=True, **common)
        steps = _steps(len(loader), accum, loader, place.world_size)
        return cls(loader, accum, micro, steps, sampler, generator, settings.seed)

    @classmethod
    def _user_loader(cls, data: DataLoader, settings: LoaderSettings, place: Placement
                     ) -> TrainData:  # fmt: skip
        unsharded = None
        if place.distributed:
            data, unsharded = shard_loader(data, place.rank, place.world_size, settings.seed)
        steps = length_of(data)
        accum = settings.grad_accum_steps
        steps = None if steps is None else _steps(steps, accum, data, place.world_size)
        return cls(data, accum, None, steps, seed=settings.seed, unsharded=unsharded)

    @property
    def owned(self) -> bool:
        """The engine built the loader: exact resume and the global-batch split hold."""
        return self.micro_batch is not None

    def start_epoch(self, epoch: int, skip_steps: int = 0) -> int:
        """Set the order of ``epoch`` from (seed, epoch), its first ``skip_steps`` optimizer
        steps left out where the sampler can seek; returns the micro-batches still to draw
        and drop (an iterable's, a user loader's)."""
        skip_batches = skip_steps * self.accum
        if self.sampler is not None:
            unit = 1 if self.batched else self.micro_batch or 0
            self.sampler.set_epoch(epoch, skip_batches * unit)
            skip_batches = 0
        else:
            _set_epoch(self.loader, epoch)
        if self.generator is not None:
            self.generator.manual_seed(epoch_seed(self.seed, epoch))
        return skip_batches

    def epoch(self, epoch: int, skip_steps: int = 0) -> Iterator[Sequence[Any]]:
        """The micro-batches of each optimizer step of ``epoch``, after ``skip_steps`` steps.

        The order is a function of (seed, epoch): the sampler's permutation and the
        workers' seeds are set from them before the loader is iterated. The loader's
        iterator is made (and a resumed epoch's batches skipped) here, before the first
        step is drawn: the loop times its steps from then on, as a hand-written loop times
        ``for batch in batches`` after ``batches = iter(loader)``.
        """
        skip_batches = self.start_epoch(epoch, skip_steps)
        batches = iter(self.loader)
        # An iterable or a user's loader cannot seek: draw the batches already trained on.
        for _ in itertools.islice(batches, skip_batches):
            pass
        left = None if self.steps_per_epoch is None else self.steps_per_epoch - skip_steps
        return self._steps(batches, left)

    def _steps(self, batches: Iterator[Any], left: int | None) -> Iterator[Sequence[Any]]:
        if self.accum == 1:  # the usual: a batch per step (a 1-tuple), drawn in C, no frame
            return zip(batches if left is None else itertools.islice(batches, left))
        return self._accumulated(batches, left)

    def _accumulated(self, batches: Iterator[Any], left: int | None) -> Iterator[list[Any]]:
        """``accum`` micro-batches per step; an iterable's end makes no partial step."""
        counted = itertools.count() if left is None else range(left)
        for _ in counted:
            step = list(itertools.islice(batches, self.accum))
            if len(step) < self.accum:  # the end of an iterable: no partial step
                return
            yield step

    def batch_plan(self, batch_size: int, world_size: int) -> str:
        """The batching in words, for the run's first line and the dry run.

        Example:
            >>> from torch.utils.data import TensorDataset
            >>> from trainwell.engine.distributed.placement import Placement
            >>> ds = TensorDataset(torch.arange(8.0))
            >>> data = TrainData.build(ds, LoaderSettings(4), Placement(torch.device("cpu")))
            >>> data.batch_plan(4, 1)
            'batch 4 (4 x 1 accum x 1 proc)'
        """
        accum = f"{self.accum} accum x {world_size} proc"
        if self.batched:
            return f"batches of data.batch_sampler x {accum}"
        if not self.owned:
            return f"the data's own DataLoader x {self.accum} accum"
        return f"batch {batch_size} ({self.micro_batch} x {accum})"

    def notes(self, world_size: int) -> list[str]:
        """What the run's start says about this loader (rich markup, one line each)."""
        many = world_size > 1
        if self.unsharded is not None:
            return [f"[yellow]warning[/]: the DataLoader the data gave is not sharded over "
                    f"{world_size} processes ({self.unsharded}): every process sees the same "
                    "data (each iterates all of it); return a Dataset or a plain DataLoader"]
        if self.batched:
            return [f"[yellow]note[/]: data.batch_sampler makes the batches: each is one "
                    f"micro-batch of one process, an optimizer step trains on {world_size} "
                    f"processes x {self.accum} of them (data.batch_size is not used)"]  # fmt: skip
        if not self.owned and many:
            return [f"[yellow]note[/]: the DataLoader the data gave is sharded over "
                    f"{world_size} processes: each takes its own share of its sampler's "
                    "indices, drawn every epoch from run.seed and the epoch; its batch size "
                    "is per process (data.batch_size is not split)"]  # fmt: skip
        if not self.owned:
            return ["[yellow]note[/]: training on the DataLoader the data gave: its batch size "
                    "is used as it is (data.batch_size is not split), and an exact resume "
                    "mid-epoch needs the engine's own loader (return a Dataset)"]  # fmt: skip
        if self.sampler is None and many:
            return ["[yellow]note[/]: an IterableDataset on several processes must shard "
                    "itself by rank (torch.distributed.get_rank()); every rank iterates it "
                    "whole otherwise"]  # fmt: skip
        return []


def _steps(batches: int, accum: int, loader: DataLoader, world_size: int = 1) -> int:
    steps = batches // accum
    if steps == 0:
        size = length_of(loader.dataset)
        if loader.batch_size is None:
            raise UserError(
                f"data: {batches} batches per process ({world_size} processes) is fewer than "
                f"the {accum} accumulation steps of one optimizer step, so no step would run"
            )
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


def shutdown_workers(loader: Any) -> None:
    """End a DataLoader's persistent worker processes now, as Lightning does at teardown,
    not whenever the loader happens to be garbage collected: once ``fit`` returns, no
    worker of its loaders is left running (a collected loader's ``__del__`` stopped
    whatever ran then for up to a minute, joining its workers). The loader stays usable:
    its next iteration starts workers afresh.

    Example:
        >>> from torch.utils.data import TensorDataset
        >>> loader = DataLoader(TensorDataset(torch.arange(4.0)), batch_size=2)
        >>> _ = list(loader); shutdown_workers(loader); len(list(loader))
        2
    """
    iterator = getattr(loader, "_iterator", None)
    stop = getattr(iterator, "_shutdown_workers", None)
    if callable(stop):
        stop()
    if iterator is not None:
        loader._iterator = None


def eval_loader(data: Any, settings: LoaderSettings, place: Placement) -> DataLoader | None:
    """A loader for evaluation that gives each rank a disjoint shard (every sample once)."""
    if data is None or isinstance(data, DataLoader):
        return data
    workers = settings.num_workers
    if isinstance(data, IterableDataset):
        sampler = None
    else:
        sampler = ShardSampler(len(data), place.rank, place.world_size)
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
        samples = [data[i] for i in range(min(n, len(data)))]
    if not samples:
        raise UserError("data: the training data yields no samples")
    return (collate or default_collate)(samples)


def dataset_of(data: Dataset | DataLoader) -> Dataset:
    """The data set behind ``data`` (itself, or a DataLoader's)."""
    return data.dataset if isinstance(data, DataLoader) else data
