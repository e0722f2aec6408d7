"""Where the batches come from: the engine's training loader, or a user's factory.

A source opens an endless stream of batches for a :class:`Setting` (epoch after epoch)
and shuts its workers down when the stream is closed, so that the next setting measured
does not share the cores with the last one's workers.

- :class:`EngineSource`: the loader ``trainwell train`` builds from the config
  (:class:`~trainwell.engine.loading.loaders.TrainData`: the same data set, micro-batch size,
  collate and resumable sampler, its epochs seeded as training seeds them).
- :class:`RebuiltSource`: a ``DataLoader`` someone else built (``--loader``, or a
  ``data.name`` that returns one), rebuilt with each setting: its data set, batching,
  sampler and collate are kept.
- :class:`AsGivenSource`: an iterable of batches that is not a ``DataLoader``: measured
  as it is, nothing to sweep; the factory is called again for every pass.

Example:
    >>> import torch
    >>> from torch.utils.data import DataLoader, TensorDataset
    >>> loader = DataLoader(TensorDataset(torch.arange(8.0)), batch_size=4)
    >>> source = source_for(loader, lambda: loader)
    >>> with source.open(Setting(0)) as batches:
    ...     [b[0].tolist() for b in itertools.islice(batches, 3)]
    [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0], [0.0, 1.0, 2.0, 3.0]]
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from trainwell.benchdata.settings import Setting
from trainwell.engine.distributed.placement import Placement
from trainwell.engine.loading.loaders import LoaderSettings, TrainData
from trainwell.errors import UserError
from trainwell.imports import resolve


class EngineSource:
    """The engine's training loader of ``data`` with ``settings``, knobs swept."""

    sweepable = True

    def __init__(self, data: Any, settings: LoaderSettings, place: Placement) -> None:
        self.data, self.settings, self.place = data, settings, place

    def describe(self) -> str:
        """What is measured, for the header line."""
        if self.settings.batch_sampler is not None:
            return "the engine's training loader, batches of data.batch_sampler"
        return f"the engine's training loader, micro-batch {self._micro()}"

    def _micro(self) -> int:
        return self.settings.batch_size // self.settings.grad_accum_steps

    @contextlib.contextmanager
    def open(self, setting: Setting) -> Iterator[Iterator[Any]]:
        """An endless stream of micro-batches with ``setting``; workers end on exit."""
        settings = dataclasses.replace(
            self.settings,
            num_workers=setting.num_workers or 0,
            pin_memory=setting.pin_memory,
            persistent_workers=setting.persistent_workers,
            prefetch_factor=setting.prefetch_factor,
        )
        train = TrainData.build(self.data, settings, self.place)
        try:
            yield _engine_epochs(train)
        finally:
            _shutdown(train.loader)


def _engine_epochs(train: TrainData) -> Iterator[Any]:
    """The loader's batches, epoch after epoch, each epoch's order set as training sets it."""
    for epoch in itertools.count():
        train.start_epoch(epoch)
        yielded = False
        for batch in train.loader:
            yielded = True
            yield batch
        if not yielded:
            return


class RebuiltSource:
    """A user's ``DataLoader``, rebuilt with each setting (data, batching, collate kept)."""

    sweepable = True

    def __init__(self, loader: DataLoader, label: str) -> None:
        self.loader, self.label = loader, label

    def describe(self) -> str:
        """What is measured, for the header line."""
        return f"{self.label}, batch {self.loader.batch_size}"

    @contextlib.contextmanager
    def open(self, setting: Setting) -> Iterator[Iterator[Any]]:
        """An endless stream of the loader's batches with ``setting``; workers end on exit."""
        loader = rebuild(self.loader, setting)
        try:
            yield _epochs(lambda: loader)
        finally:
            _shutdown(loader)


def rebuild(loader: DataLoader, setting: Setting) -> DataLoader:
    """``loader`` with the knobs of ``setting``; its data, batches and order unchanged.

    Example:
        >>> import torch
        >>> from torch.utils.data import TensorDataset
        >>> old = DataLoader(TensorDataset(torch.arange(6.0)), batch_size=3, shuffle=True)
        >>> new = rebuild(old, Setting(0))
        >>> new.batch_sampler is old.batch_sampler, new.num_workers
        (True, 0)
    """
    workers = setting.num_workers or 0
    common = dict(
        num_workers=workers,
        collate_fn=loader.collate_fn,
        pin_memory=setting.pin_memory and torch.cuda.is_available(),
        timeout=loader.timeout,
        worker_init_fn=loader.worker_init_fn,
        multiprocessing_context=loader.multiprocessing_context if workers else None,
        generator=loader.generator,
        persistent_workers=workers > 0 and setting.persistent_workers,
        prefetch_factor=setting.prefetch_factor if workers else None,
    )
    if isinstance(loader.dataset, IterableDataset):
        # No sampler to carry over: batch size and drop_last say it all.
        return DataLoader(loader.dataset, batch_size=loader.batch_size,
                          drop_last=loader.drop_last, **common)  # fmt: skip
    if loader.batch_sampler is not None:  # batch size, drop_last and order in one object
        return DataLoader(loader.dataset, batch_sampler=loader.batch_sampler, **common)
    return DataLoader(loader.dataset, batch_size=None, sampler=loader.sampler, **common)


class AsGivenSource:
    """An iterable of batches that is not a DataLoader: measured as it is."""

    sweepable = False

    def __init__(self, factory: Callable[[], Iterable[Any]], label: str) -> None:
        self.factory, self.label = factory, label

    def describe(self) -> str:
        """What is measured, for the header line."""
        return f"{self.label} (not a DataLoader: its settings cannot be swept)"

    @contextlib.contextmanager
    def open(self, setting: Setting) -> Iterator[Iterator[Any]]:
        """The batches, pass after pass (the factory is called for each)."""
        yield _epochs(lambda: _call(self.factory, self.label))


def _epochs(make: Callable[[], Iterable[Any]]) -> Iterator[Any]:
    for _ in itertools.count():
        yielded = False
        for batch in make():
            yielded = True
            yield batch
        if not yielded:
            return


def _shutdown(loader: DataLoader) -> None:
    # Persistent workers live as long as the loader's iterator: end them now, not at
    # garbage collection, so the next setting has the cores to itself.
    iterator = getattr(loader, "_iterator", None)
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if callable(shutdown):
        shutdown()
    loader._iterator = None


def load_factory(path: str) -> tuple[Any, Callable[[], Any]]:
    """Resolve ``--loader pkg.module:fn`` and call it once: ``(its result, the factory)``.

    A path that does not import, an object that is not callable, a call that raises or a
    result that is not iterable is a one-line :class:`UserError`.

    Example:
        >>> load_factory("torch.nn:Linear")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        trainwell.errors.UserError: --loader: calling 'torch.nn:Linear' raised TypeError: ...
    """
    factory = resolve(path, "--loader")
    if not callable(factory):
        raise UserError(f"--loader: {path!r} is a {type(factory).__name__}, not a function")
    return _call(factory, path), factory


def _call(factory: Callable[[], Any], label: str) -> Any:
    try:
        out = factory()
    except Exception as exc:
        message = str(exc).strip().splitlines()
        raise UserError(
            f"--loader: calling {label!r} raised {type(exc).__name__}: "
            f"{message[0] if message else ''}"
        ) from exc
    if not isinstance(out, Iterable):
        raise UserError(
            f"--loader: {label!r} returned {type(out).__name__}, not a DataLoader or an "
            "iterable of batches"
        )
    return out


def source_for(made: Any, factory: Callable[[], Any], label: str = "the loader") -> Any:
    """The source for what a factory returned: a DataLoader is rebuilt, anything else is
    measured as given."""
    if isinstance(made, DataLoader):
        return RebuiltSource(made, label)
    return AsGivenSource(factory, label)
