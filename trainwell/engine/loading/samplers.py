"""A user's sampler or batch sampler, drawn per epoch from the seed and sharded over ranks.

``data.sampler`` (a ``Sampler`` of indices, e.g. a class-balancing
``WeightedRandomSampler``) and ``data.batch_sampler`` (lists of indices, e.g. length
buckets) are built by the user's factory; a ``DataLoader`` the user built carries its
own. On N processes each must give every rank its own share of the epoch, as Lightning's
``DistributedSamplerWrapper`` does: every rank draws the same full epoch (the wrapped
sampler seeded from ``(run.seed, epoch)`` alone, its generator and the global RNGs
included), then keeps every N-th item from its rank on, the epoch cut to a multiple of
N so that the ranks take the same number of steps. Seeded that way, the order also
changes every epoch, repeats exactly in a rerun, and a resumed epoch skips exactly the
items already trained on.

Example:
    >>> from torch.utils.data import WeightedRandomSampler
    >>> weights = [1.0] * 6 + [5.0] * 2
    >>> ranks = [ShardedSampler(WeightedRandomSampler(weights, 8), r, 2, seed=0) for r in (0, 1)]
    >>> for s in ranks:
    ...     s.set_epoch(3)
    >>> [len(s) for s in ranks], list(ranks[0]) != list(ranks[1])
    ([4, 4], True)
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, IterableDataset, Sampler

from trainwell.engine.loading.seeding import epoch_seed
from trainwell.errors import UserError
from trainwell.imports import call_with, parse_spec, resolve

# Who is named when the sampler of a user's DataLoader yields something unusable.
_LOADER_KEY = "data.name (its DataLoader's sampler)"
# How deep a generator is looked for: a batch sampler's sampler's generator.
_NESTING = ("sampler", "batch_sampler")


def draw_epoch(sampler: Any, seed: int, epoch: int) -> list[Any]:
    """Every item ``sampler`` yields in ``epoch``, drawn from ``(seed, epoch)`` alone.

    The sampler's ``set_epoch`` is called if it has one; its ``generator`` (and that of
    a sampler it wraps) is replaced by one seeded for the epoch while it is drawn; torch's,
    NumPy's and Python's global generators are seeded too and left as they were, so a
    sampler drawing from any of them repeats and the training's own streams do not move.

    Example:
        >>> from torch.utils.data import RandomSampler
        >>> s = RandomSampler(range(5))
        >>> draw_epoch(s, 0, 1) == draw_epoch(s, 0, 1) != draw_epoch(s, 0, 2)
        True
    """
    set_epoch = getattr(sampler, "set_epoch", None)
    if callable(set_epoch):
        set_epoch(epoch)
    seed = epoch_seed(seed, epoch)
    with _global_rngs(seed), _generators(sampler, seed):
        return list(sampler)


@contextlib.contextmanager
def _global_rngs(seed: int) -> Iterator[None]:
    py_state, np_state = random.getstate(), np.random.get_state()
    # devices=[]: the sampler runs on the host; forking CUDA RNGs would cost a sync each.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        random.seed(seed)
        np.random.seed(seed % 2**32)
        try:
            yield
        finally:
            random.setstate(py_state)
            np.random.set_state(np_state)


@contextlib.contextmanager
def _generators(sampler: Any, seed: int) -> Iterator[None]:
    # A generator the user fixed once (WeightedRandomSampler(generator=g)) moves on from
    # epoch to epoch, so its state would have to be checkpointed; one seeded per epoch
    # needs nothing saved. None stays None: the seeded global RNG serves it.
    swapped = []
    for owner in _owners(sampler):
        if isinstance(getattr(owner, "generator", None), torch.Generator):
            swapped.append((owner, owner.generator))
            owner.generator = torch.Generator().manual_seed(seed + len(swapped))
    try:
        yield
    finally:
        for owner, generator in swapped:
            owner.generator = generator


def _owners(sampler: Any) -> list[Any]:
    owners: list[Any] = []
    todo = [sampler]
    while todo:
        obj = todo.pop()
        if obj is None or any(obj is o for o in owners) or len(owners) > 4:
            continue
        owners.append(obj)
        todo += [getattr(obj, name, None) for name in _NESTING]
    return owners


def _in_range(flat: torch.Tensor, size: int) -> bool:
    """Whether ``flat`` is a 1-D tensor of integer indices, each in ``[0, size)``."""
    if flat.ndim != 1 or flat.is_floating_point() or flat.dtype == torch.bool:
        return False
    return int(flat.min()) >= 0 and int(flat.max()) < size


def _length(obj: Any) -> int | None:
    try:
        return len(obj)
    except TypeError:
        return None


class _Sharded:
    """What a sharded sampler and a sharded batch sampler share: the epoch, the count and
    the rank's share of each drawn epoch."""

    def __init__(self, inner: Any, rank: int, world_size: int, seed: int,
                 size: int | None = None, key: str = "data.sampler") -> None:  # fmt: skip
        self.inner, self.rank, self.world_size, self.seed = inner, rank, world_size, seed
        self.size, self.key = size, key
        self.epoch, self.skip = 0, 0
        self._drawn: tuple[int, list[Any]] | None = None
        count = _length(inner)
        # No __len__: the first epoch, drawn, says how many items an epoch holds.
        self.count = count if count is not None else len(self.items(0))
        # Cut to a multiple of the processes (as DistributedSampler(drop_last=True)).
        self.per_rank = self.count // world_size

    def set_epoch(self, epoch: int, skip: int = 0) -> None:
        """Draw ``epoch`` next, leaving out this rank's first ``skip`` items (a resume)."""
        self.epoch, self.skip = epoch, skip

    def items(self, epoch: int) -> list[Any]:
        """The whole epoch, every rank's items, checked (drawn once per epoch)."""
        if self._drawn is None or self._drawn[0] != epoch:
            items = self.check_all(draw_epoch(self.inner, self.seed, epoch))
            if not items:
                raise UserError(f"{self.key}: the sampler yielded nothing for epoch {epoch}")
            self._drawn = (epoch, items)
        return self._drawn[1]

    def mine(self) -> list[Any]:
        """This rank's items of the current epoch, after the skipped ones."""
        items = self.items(self.epoch)
        if len(items) < self.count:  # a sampler that yields fewer this epoch: wrap around
            items = (items * -(-self.count // len(items)))[: self.count]
        end = self.per_rank * self.world_size
        return items[self.rank : end : self.world_size][self.skip :]

    def __len__(self) -> int:
        return max(self.per_rank - self.skip, 0)

    def check_all(self, items: list[Any]) -> list[Any]:
        return [self.check(item) for item in items]

    def check(self, item: Any) -> Any:
        raise NotImplementedError

    def _index(self, value: Any) -> int:
        try:
            index = int(value)
        except (TypeError, ValueError):
            raise UserError(
                f"{self.key}: the sampler yielded {value!r}, not an integer index"
            ) from None
        if index < 0 or (self.size is not None and index >= self.size):
            raise UserError(
                f"{self.key}: the sampler yielded index {index}, outside the training data "
                f"({self.size} samples)"
            )
        return index


class ShardedSampler(_Sharded, Sampler[int]):
    """A sampler of indices, each epoch drawn from the seed; rank ``r`` of ``N`` takes
    items ``r, r + N, ...`` of the drawn epoch (cut to a multiple of ``N``).

    ``set_epoch(epoch, skip)`` selects the epoch and leaves out the rank's first ``skip``
    indices (the samples a resumed epoch already trained on).

    Example:
        >>> from torch.utils.data import SequentialSampler
        >>> s = ShardedSampler(SequentialSampler(range(7)), rank=1, world_size=2, seed=0)
        >>> list(s), len(s)
        ([1, 3, 5], 3)
        >>> s.set_epoch(0, skip=1)
        >>> list(s)
        [3, 5]
    """

    def __iter__(self) -> Iterator[int]:
        return iter(self.mine())

    def check_all(self, items: list[Any]) -> list[Any]:
        # Integer indices are checked at once (a million per epoch cost 0.3 s one by one).
        try:
            flat = torch.as_tensor(items)
        except (TypeError, ValueError, RuntimeError):
            return super().check_all(items)
        if self.size is not None and len(items) > 0 and _in_range(flat, self.size):
            return flat.tolist()
        return super().check_all(items)  # names the first bad item

    def check(self, item: Any) -> Any:
        # Without a length (a loader with batch_size=None), items are the data set's keys.
        return item if self.size is None else self._index(item)


class ShardedBatchSampler(_Sharded, Sampler[list[int]]):
    """A batch sampler (lists of indices), each epoch drawn from the seed; rank ``r`` of
    ``N`` takes batches ``r, r + N, ...`` (cut to a multiple of ``N``).

    Example:
        >>> batches = BatchSampler(range(10), batch_size=3, drop_last=False)
        >>> s = ShardedBatchSampler(batches, rank=0, world_size=2, seed=0)
        >>> list(s)
        [[0, 1, 2], [6, 7, 8]]
    """

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.mine())

    def check(self, item: Any) -> list[int]:
        try:
            batch = [self._index(i) for i in item]
        except TypeError:
            raise UserError(
                f"{self.key}: the batch sampler yielded {item!r}, not a list of indices"
            ) from None
        if not batch:
            raise UserError(f"{self.key}: the batch sampler yielded an empty batch")
        return batch


def check_sampler(obj: Any, key: str) -> Any:
    """What a ``data.sampler``/``data.batch_sampler`` factory returned, if usable.

    Example:
        >>> check_sampler(42, "data.sampler")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        trainwell.errors.UserError: data.sampler: the factory returned int, not a sampler ...
    """
    what = "lists of indices" if key == "data.batch_sampler" else "indices"
    if not hasattr(obj, "__iter__") or isinstance(obj, (str, bytes, torch.Tensor)):
        raise UserError(
            f"{key}: the factory returned {type(obj).__name__}, not a sampler (an iterable "
            f"of {what})"
        )
    if isinstance(obj, DistributedSampler):
        raise UserError(
            f"{key}: the factory returned a DistributedSampler; return the sampler itself, "
            "the engine shards it over the processes"
        )
    return obj


def build_sampler(spec: Any, train: Any, key: str) -> Any:
    """Call the factory ``spec`` names (``data.sampler`` / ``data.batch_sampler``) with
    the training data set and its kwargs; ``None`` when unset.

    Example:
        >>> s = build_sampler({"name": "torch.utils.data:RandomSampler",
        ...                    "kwargs": {"num_samples": 3}}, list(range(10)), "data.sampler")
        >>> len(s)
        3
    """
    if not spec:
        return None
    if isinstance(train, DataLoader):
        raise UserError(
            f"{key}: the training data is a DataLoader, which has its own sampler; return "
            "the Dataset instead (or build the loader with your sampler)"
        )
    if isinstance(train, IterableDataset):
        raise UserError(f"{key}: the training data is an IterableDataset, which has no "
                        "indices to sample; return a map-style Dataset")  # fmt: skip
    path, kwargs = parse_spec(spec, key)
    factory = resolve(path, key)
    if not callable(factory):
        raise UserError(f"{key}: {path!r} is a {type(factory).__name__}, not a factory")
    return check_sampler(call_with(factory, kwargs, {}, key, args=(train,)), key)


def shard_loader(loader: DataLoader, rank: int, world_size: int, seed: int) -> tuple[
        DataLoader, str | None]:  # fmt: skip
    """A user's DataLoader rebuilt with its sampler (or batch sampler) sharded over the
    ranks, its other settings kept; or the loader as it is and why it cannot be sharded.

    Returns ``(loader, None)`` when sharded (or already sharded by a DistributedSampler),
    ``(loader, reason)`` when every rank will see the same data.

    Example:
        >>> loader = DataLoader(list(range(8)), batch_size=2, shuffle=True)
        >>> sharded, reason = shard_loader(loader, rank=0, world_size=2, seed=0)
        >>> len(sharded), reason, sharded.batch_size
        (2, None, 2)
    """
    if isinstance(loader.dataset, IterableDataset):
        return loader, "its data set is an IterableDataset (it has no sampler to shard)"
    if type(loader) is not DataLoader:
        return loader, f"it is a {type(loader).__name__}, a DataLoader subclass it cannot rebuild"
    batch_sampler = loader.batch_sampler
    if any(isinstance(s, DistributedSampler) for s in _owners(batch_sampler or loader.sampler)):
        return loader, None  # the user's own DistributedSampler shards it already
    size = _length(loader.dataset)
    common = _settings(loader)
    if batch_sampler is None:  # batch_size=None: the sampler's items are the batches
        sharded = ShardedSampler(loader.sampler, rank, world_size, seed, None, _LOADER_KEY)
        return DataLoader(loader.dataset, batch_size=None, sampler=sharded, **common), None
    if type(batch_sampler) is BatchSampler:  # batch_size=, shuffle=, sampler=
        sampler = ShardedSampler(loader.sampler, rank, world_size, seed, size, _LOADER_KEY)
        return DataLoader(loader.dataset, batch_size=loader.batch_size, sampler=sampler,
                          drop_last=loader.drop_last, **common), None  # fmt: skip
    sharded_batches = ShardedBatchSampler(batch_sampler, rank, world_size, seed, size,
                                          _LOADER_KEY)  # fmt: skip
    return DataLoader(loader.dataset, batch_sampler=sharded_batches, **common), None


def _settings(loader: DataLoader) -> dict[str, Any]:
    """Every setting of ``loader`` but its data, sampler and batching."""
    workers = loader.num_workers
    return dict(
        num_workers=workers,
        collate_fn=loader.collate_fn,
        pin_memory=loader.pin_memory,
        timeout=loader.timeout,
        worker_init_fn=loader.worker_init_fn,
        multiprocessing_context=loader.multiprocessing_context if workers else None,
        generator=loader.generator,
        prefetch_factor=loader.prefetch_factor if workers else None,
        persistent_workers=loader.persistent_workers,
        pin_memory_device=loader.pin_memory_device,
        in_order=getattr(loader, "in_order", True),
    )
