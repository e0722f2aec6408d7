"""Timing one loader setting: first-batch latency, steady batches/s, peak memory.

The clock of the steady rate starts only once the batches the workers loaded while the
first one was coming (``prefetch_factor x num_workers`` of them) are drained: those come
for free and would make a short measurement flatter every extra worker. Memory is the
resident set of this process and its children (the workers), read from ``/proc`` a few
times a second; it costs microseconds and is ``None`` off Linux.

Example:
    >>> batches = iter(range(1000))
    >>> row = measure(Setting(0), batches, seconds=0.05)
    >>> row.batches > 2 and row.batches_per_s > 0
    True
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trainwell.benchdata.settings import DEFAULT_PREFETCH, Row, Setting
from trainwell.errors import UserError

MB = 2**20
# Resident memory is read at most this often (seconds).
RSS_EVERY = 0.2
# A slow loader gets this many steady batches even past its time, and no more than this
# multiple of its time to give them.
MIN_BATCHES = 2
OVERRUN = 3.0
# The least share of a setting's time spent on the steady rate, however slow its start.
STEADY_SHARE = 0.3


def measure(
    setting: Setting,
    batches: Iterator[Any],
    seconds: float,
    keep: list[Any] | None = None,
    keep_count: int = 0,
) -> Row:
    """Draw batches from ``batches`` for about ``seconds`` (the first batch included) and
    time them.

    The first ``keep_count`` batches are appended to ``keep`` (the model's rate is
    measured on them later, without loading anything). An error while loading becomes a
    one-line :class:`UserError`.

    Example:
        >>> kept = []
        >>> row = measure(Setting(0), iter(range(100)), 0.01, kept, keep_count=3)
        >>> kept
        [0, 1, 2]
    """
    rss = TreeRSS()
    start = time.perf_counter()
    first = _next(batches)
    now = time.perf_counter()
    first_s = now - start
    if first is _END:
        raise UserError("data: the loader gave no batch")
    if keep is not None and keep_count:
        keep.append(first)
    # Prefetched while the first batch was coming: free, so not part of the steady rate.
    skip = (setting.num_workers or 0) * (setting.prefetch_factor or DEFAULT_PREFETCH)
    times = [now]
    # The time is the setting's, start-up included, but the steady rate gets at least a
    # share of it; a slow loader may overrun, by a bounded amount, to give a rate at all.
    deadline = max(start + seconds, now + STEADY_SHARE * seconds)
    hard_stop = now + OVERRUN * seconds
    while True:
        batch = _next(batches)
        now = time.perf_counter()
        if batch is _END:
            break
        times.append(now)
        if keep is not None and len(keep) < keep_count:
            keep.append(batch)
        rss.sample(now)
        if now >= hard_stop or (now >= deadline and len(times) > MIN_BATCHES + skip):
            break
    return Row(setting, _rate(times, skip), first_s, rss.peak_mb(), len(times))


_END = object()


def _next(batches: Iterator[Any]) -> Any:
    try:
        return next(batches, _END)
    except Exception as exc:  # the user's data set, collate or worker failed
        line = str(exc).strip().splitlines()
        raise UserError(
            f"data: loading a batch raised {type(exc).__name__}: {line[-1] if line else ''}"
        ) from exc


def _rate(times: list[float], skip: int) -> float:
    """Batches per second between the end of the prefetched run and the last batch.

    Example:
        >>> _rate([0.0, 0.0, 0.0, 1.0, 2.0], skip=2)
        1.0
        >>> _rate([0.0, 0.5], skip=4)   # too few batches to skip any
        2.0
    """
    # Keep at least half of the batches after the first for the rate.
    skip = min(skip, (len(times) - 1) // 2)
    begin = times[skip]
    span = times[-1] - begin
    steady = len(times) - 1 - skip
    if steady <= 0:
        return 0.0
    return steady / span if span > 0 else float("inf")


class TreeRSS:
    """The peak resident memory of this process and its descendants, sampled.

    Example:
        >>> rss = TreeRSS()
        >>> rss.sample(0.0)
        >>> rss.peak_mb() is None or rss.peak_mb() > 0
        True
    """

    def __init__(self) -> None:
        self.peak: int | None = None
        self._next = 0.0
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

    def sample(self, now: float) -> None:
        """Read the memory now, unless it was read less than ``RSS_EVERY`` ago."""
        if now < self._next:
            return
        self._next = now + RSS_EVERY
        total = tree_rss_pages(os.getpid())
        if total is not None:
            self.peak = max(self.peak or 0, total * self._page)

    def peak_mb(self) -> float | None:
        """The peak seen, in MB (``None`` when never read)."""
        return None if self.peak is None else self.peak / MB


def tree_rss_pages(pid: int) -> int | None:
    """Resident pages of ``pid`` and all its descendants (``None`` without ``/proc``).

    Example:
        >>> pages = tree_rss_pages(os.getpid())
        >>> pages is None or pages > 0
        True
    """
    if not Path("/proc/self/statm").exists():
        return None
    total, todo, seen = 0, [pid], set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        total += _resident(current)
        todo.extend(_children(current))
    return total


def _resident(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):  # it ended meanwhile
        return 0


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return out
