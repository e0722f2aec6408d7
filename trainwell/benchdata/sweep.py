"""The sweep: loader settings measured one after another inside one time budget.

Two rounds, as an engineer tunes a loader by hand. First ``num_workers`` alone (0, 1,
2, ... up to the usable cores, plain loaders); then, on the cheapest worker count within
5% of the fastest, each extra alone: pinned memory (with CUDA), persistent workers, a
deeper prefetch. Every extra that is on by default in PyTorch or trainwell has to earn
its place. Each setting gets the budget left divided by the settings left, so a slow
start-up early is paid for by the later ones, not by the total.

Example:
    >>> import torch
    >>> from torch.utils.data import DataLoader, TensorDataset
    >>> from trainwell.benchdata.sources import source_for
    >>> loader = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=8)
    >>> result = sweep(source_for(loader, lambda: loader), seconds=0.2, cores=1, cuda=False)
    >>> [row.setting.describe() for row in result.rows[:2]]
    ['0 workers', '1 worker']
    >>> result.recommended in result.rows
    True
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from trainwell.benchdata.measure import measure
from trainwell.benchdata.settings import (
    TOLERANCE,
    Row,
    Setting,
    extras_to_try,
    recommend,
    worker_counts,
)
from trainwell.errors import UserError

# No setting is measured for less than this (seconds), whatever the budget says.
MIN_SLOT = 0.2


@dataclass
class SweepResult:
    """What :func:`sweep` found.

    Attributes:
        rows: every setting measured, in the order measured.
        recommended: the cheapest row within ``tolerance`` of the fastest.
        best: the fastest row.
        kept: the first batches of the first setting (for the model's rate).
        seconds: wall time of the sweep.
        cuda: pinned memory was tried (it matters only with CUDA).
    """

    rows: list[Row]
    recommended: Row
    best: Row
    kept: list[Any] = field(default_factory=list)
    seconds: float = 0.0
    cuda: bool = False

    def to_json(self) -> dict[str, Any]:
        """``{"table": [...], "recommended": {...}}``, the ``--json`` contract.

        Example:
            >>> row = Row(Setting(0), 3.0, 0.1)
            >>> sorted(SweepResult([row], row, row).to_json())
            ['recommended', 'table']
        """
        return {
            "table": [row.to_json() for row in self.rows],
            "recommended": self.recommended.to_json(),
        }


class Budget:
    """Shares what is left of ``seconds`` among the settings left.

    Example:
        >>> budget = Budget(10.0, planned=4)
        >>> round(budget.slot(), 1)
        2.5
    """

    def __init__(self, seconds: float, planned: int) -> None:
        self.end = time.perf_counter() + seconds
        self.left = max(planned, 1)

    def slot(self) -> float:
        """The seconds for the next setting (at least ``MIN_SLOT``)."""
        share = (self.end - time.perf_counter()) / max(self.left, 1)
        self.left -= 1
        return max(share, MIN_SLOT)


def sweep(
    source: Any,
    seconds: float,
    cores: int | None = None,
    cuda: bool | None = None,
    keep_count: int = 0,
    on_setting: Callable[[Setting], None] | None = None,
    tolerance: float = TOLERANCE,
) -> SweepResult:
    """Measure ``source`` (see :mod:`trainwell.benchdata.sources`) under the settings worth
    trying, in about ``seconds``, and recommend one.

    Args:
        source: where batches come from; one that is not sweepable is measured as given.
        seconds: the total budget (> 0).
        cores: worker counts go up to this (default: the cores this process may use).
        cuda: whether pinned memory is worth trying (default: CUDA is available).
        keep_count: batches of the first setting kept in ``result.kept``.
        on_setting: called with each setting before it is measured (progress).
        tolerance: rows this close to the fastest count as fast.

    Returns:
        A :class:`SweepResult`.
    """
    check_seconds(seconds)
    started = time.perf_counter()
    cuda = torch.cuda.is_available() if cuda is None else cuda
    kept: list[Any] = []
    if not source.sweepable:
        settings: list[Setting] = [Setting(None)]
    else:
        settings = [Setting(w) for w in worker_counts(cores or _usable_cores())]
    # Extras come second, on one worker count: as many of them as one count can take.
    extras_planned = len(extras_to_try(Setting(1), cuda)) if source.sweepable else 0
    budget = Budget(seconds, len(settings) + extras_planned)
    rows = [_one(source, s, budget, kept, keep_count, on_setting) for s in settings]
    if source.sweepable:
        base = recommend(rows, tolerance).setting
        rows += [_one(source, s, budget, kept, 0, on_setting) for s in extras_to_try(base, cuda)]
    best = max(rows, key=lambda row: row.batches_per_s)
    return SweepResult(rows, recommend(rows, tolerance), best, kept,
                       time.perf_counter() - started, cuda)  # fmt: skip


def _one(
    source: Any,
    setting: Setting,
    budget: Budget,
    kept: list[Any],
    keep_count: int,
    on_setting: Callable[[Setting], None] | None,
) -> Row:
    if on_setting is not None:
        on_setting(setting)
    slot = budget.slot()
    with source.open(setting) as batches:
        return measure(setting, batches, slot, kept, keep_count if not kept else 0)


def check_seconds(seconds: float) -> None:
    """Refuse a budget that is not a positive, finite number of seconds.

    Example:
        >>> check_seconds(0)
        Traceback (most recent call last):
        ...
        trainwell.errors.UserError: --seconds must be a positive number of seconds; got 0
    """
    number = isinstance(seconds, (int, float)) and not isinstance(seconds, bool)
    if not (number and math.isfinite(seconds) and seconds > 0):
        shown = f"{seconds:g}" if number else repr(seconds)
        raise UserError(f"--seconds must be a positive number of seconds; got {shown}")


def _usable_cores() -> int:
    from trainwell.env import usable_cores

    return usable_cores() or os.cpu_count() or 1
