"""The ``data-bottleneck`` probe."""

from __future__ import annotations

import os
import statistics
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

import torch

from trainwell.doctor.events import BatchEvent, EpochEndEvent, Reporter
from trainwell.doctor.findings import Finding
from trainwell.doctor.sites import Site, is_user_file
from trainwell.env import usable_cores


class _Loader:
    """One data set's batches: the waits for ``next()`` and the work between two
    batches, the last window of them."""

    __slots__ = ("waits", "works", "wins", "last", "last_cpu", "last_queued", "steps",
                 "seen", "fresh", "timed", "site", "settings", "kind")  # fmt: skip

    def __init__(self) -> None:
        # The last WINDOW of each, appended in place (a new list per batch costs more).
        self.waits: deque[float] = deque(maxlen=DataBottleneckProbe.WINDOW)
        self.works: deque[float] = deque(maxlen=DataBottleneckProbe.WINDOW)
        self.wins: deque[float] = deque(maxlen=DataBottleneckProbe.WINDOW)  # see winnable
        self.last = self.last_cpu = self.last_queued = 0.0
        self.steps = -1  # the optimizer steps at the last batch
        self.seen = 0  # batches seen
        self.fresh = 0  # batches that came first out of a new iterator
        self.timed = 0  # batches timed (training used them), the whole run
        # Of the last batch: the loop's line, the loader's settings, the data set's class
        # (not the iterator: holding it would keep its worker processes alive).
        self.site: Site | None = None
        self.settings: dict[str, Any] = {}
        self.kind: type | None = None

    def note(self, event: BatchEvent) -> None:
        it = event.loader
        self.site, self.kind = event.site, type(it._dataset)
        if not self.settings:
            self.settings = {
                "num_workers": it._num_workers,
                "pin_memory": it._pin_memory,
                "persistent_workers": getattr(it, "_persistent_workers", False),
                "batch_size": getattr(getattr(it, "_index_sampler", None), "batch_size", None),
            }


class DataBottleneckProbe:
    """``data-bottleneck``: the loop spends most of its time waiting for batches.

    For each DataLoader, the wait for ``next()`` is compared with the work between two
    batches (its wall time, or the CPU time the training thread used when less: on a
    busy machine the computing slows down and the waiting on files does not; the
    process's CPU time would count the intra-op threads' spinning too), for the batches
    training used (an optimizer step between two) after the first ones (worker start-up,
    the doctor's own first-steps checks). Judged on the first quartiles of the last
    ``WINDOW`` batches, at every ``WINDOW`` batches and at the end of each pass: slow
    steps (a busy machine, a collection, a checkpoint) move them little. Both timings
    are taken less the time the thread sat queued for a CPU where Linux says it
    (:mod:`~trainwell.doctor.clock`): a busy machine must not make a loop look
    data-bound (see :func:`winnable`). A short wait is never worth a warning, whatever
    its share, nor a run in which workers would win back less than ``MIN_LOST_S`` in all
    (the winnable part of the wait per batch times the batches timed): they cost about
    that to start. The finding points where the fix goes: the ``DataLoader(...)`` call
    (``num_workers``, ``pin_memory``) with the data set's ``__getitem__`` as related;
    when each batch comes from a new iterator (``next(iter(loader))`` every step), the
    line that makes it.
    """

    SKIP = 3
    WINDOW = 24
    MIN_BATCHES = 12  # judged at the end of a pass only with this many timed
    SHARE = 0.5
    MIN_WAIT_S = 0.005
    # Below a second lost over the whole run the fix buys nothing: forking workers costs
    # 0.1-0.5 s per epoch (without persistent_workers), spawning them (macOS, Windows)
    # seconds. A tiny loop's in-process transforms of 5-23 ms per batch over 50 batches
    # (half of 0.25-1.1 s winnable on 2 cores) stay under it; a real pipeline bottleneck
    # loses that much within a few dozen steps.
    MIN_LOST_S = 1.0

    def __init__(self) -> None:
        self.loaders: dict[int, _Loader] = {}
        self.reported: set[int] = set()
        self.cores = usable_cores() or os.cpu_count() or 1

    def on_batch(self, doc: Reporter, event: BatchEvent) -> None:
        now, cpu = time.perf_counter(), time.thread_time()
        key = id(event.loader._dataset)
        if key in self.reported:
            return
        st = self.loaders.get(key)
        if st is None:
            st = self.loaders[key] = _Loader()
        last, st.last = st.last, now
        last_cpu, st.last_cpu = st.last_cpu, cpu
        # Queued for a CPU when the last wait ended (the work began) and this one began.
        last_queued, st.last_queued = st.last_queued, event.queued_s + event.wait_queued_s
        stepped, st.steps = st.steps != doc.steps, doc.steps
        st.seen += 1
        st.fresh += event.index == 1
        # The first batches of the data set warm up; a new iterator later (a new epoch,
        # or next(iter(loader)) every step) is part of the cost.
        # Only batches that training used (an optimizer step since the last one): an
        # evaluation loop waits for its batches by nature, with little work between.
        if st.seen <= self.SKIP or event.index == 1 and st.seen <= 2 * self.SKIP or not stepped:
            return
        work = now - last - event.wait_s
        if event.queued_s:  # less the time queued for a CPU, in the wait and in the work
            work -= event.queued_s - last_queued
        else:
            # Unknown: the work's wall time, unless the thread used less CPU than that
            # (a busy machine slows the computing, not the waiting on files).
            work = min(work, cpu - last_cpu - event.wait_cpu_s)
        wait, win = winnable(event, self.cores)
        st.waits.append(wait)
        st.wins.append(win)
        st.works.append(max(work, 0.0))
        st.timed += 1
        st.note(event)
        if len(st.waits) == self.WINDOW and st.seen % self.WINDOW == 0:
            self._judge(doc, key, st)

    def on_epoch_end(self, doc: Reporter, event: EpochEndEvent) -> None:
        key = id(event.dataset)
        st = self.loaders.get(key)
        if st is not None and key not in self.reported:
            self._judge(doc, key, st)

    def on_end(self, doc: Reporter) -> None:
        for key, st in self.loaders.items():
            if key not in self.reported:
                self._judge(doc, key, st)

    def _judge(self, doc: Reporter, key: int, st: _Loader) -> None:
        if len(st.waits) < self.MIN_BATCHES:
            return
        wait, work = _low(st.waits), _low(st.works)
        share = wait / max(wait + work, 1e-9)
        lost = _low(st.wins) * st.timed  # what workers would win back, the whole run
        if share < self.SHARE or wait < self.MIN_WAIT_S or lost < self.MIN_LOST_S:
            return
        per_step = st.fresh >= 0.5 * st.seen  # most batches came out of a new iterator
        loader_site = doc.loader_sites.get(key)
        site = st.site if per_step else loader_site or st.site
        if site is None:
            return
        self.reported.add(key)
        doc.add(_bottleneck(st, share, wait, site, per_step, loader_site, self.cores))


def winnable(event: BatchEvent, cores: int) -> tuple[float, float]:
    """The wait for ``next()`` as it would be on an idle machine, and the part of it that
    workers would win back on this one.

    The wait is split into computing (the CPU time the thread used in it: loading in the
    main process) and the rest (files, sockets, the queue from the workers), less the
    time queued for a CPU. A busy machine also inflates the CPU time of torch operations
    spread over intra-op threads: the thread spins at each barrier while a partner thread
    sits queued, so the computing is taken at the share of the wait no other thread was
    queued. Measured on 2 cores beside three CPU-burning processes, CPU per batch alone /
    busy / as taken: a torch per-sample transform 24 / 61 / 25 ms (its partner queued 60%
    of the wait), PIL resizing 131 / 145 / 137 ms, numpy FFTs 85 / 97 / 89 ms (5-8%).
    Workers win back all of the rest, but computing only as far as it spreads over the
    cores: on 2 cores, half of it.

    Example:
        >>> e = BatchEvent(None, None, 0.040, 2, wait_cpu_s=0.040)  # 40 ms computing
        >>> winnable(e, cores=2)  # the wait, and what 2 cores' workers win back
        (0.04, 0.02)
    """
    wall = max(event.wait_s - event.wait_queued_s, 0.0)
    computing = min(event.wait_cpu_s, wall)
    rest = wall - computing
    if event.wait_s > 0:
        computing *= max(1.0 - event.wait_others_queued_s / event.wait_s, 0.0)
    return rest + computing, rest + computing * (1.0 - 1.0 / cores)


def _low(values: Iterable[float]) -> float:
    """The first quartile: timings only ever come out longer than the work takes (a
    busy machine, a descheduled thread, a collection), so the low ones tell it best."""
    return statistics.quantiles(values, n=4)[0]


def _getitem_site(kind: type | None) -> Site | None:
    """The ``def __getitem__`` of the data set's class, when the user wrote it."""
    code = getattr(getattr(kind, "__getitem__", None), "__code__", None)
    if code is None or not is_user_file(code.co_filename):
        return None
    return Site(code.co_filename, code.co_firstlineno)


def _fixes(settings: dict[str, Any], per_step: bool, cores: int) -> list[str]:
    workers = settings["num_workers"]
    changes = []
    if per_step:
        changes.append("make the iterator once (it = iter(loader)) and call next(it) each "
                       "step, starting a new one when it runs out: a new iterator starts the "
                       "loading (and the workers) over every step")  # fmt: skip
    if workers == 0:
        changes.append(f"num_workers={min(8, max(2, cores))} in the DataLoader (this machine "
                       f"has {cores} cores)")  # fmt: skip
    elif workers < cores:
        changes.append(f"more workers (num_workers={min(cores, 2 * workers)})")
    if workers and not settings["persistent_workers"]:
        changes.append("persistent_workers=True (workers are not restarted every epoch)")
    if torch.cuda.is_available() and not settings["pin_memory"]:
        changes.append("pin_memory=True with .to(device, non_blocking=True)")
    changes.append("move per-sample work out of __getitem__ (decode / resize once ahead of "
                   "time and cache tensors; augment on the GPU in batches)")  # fmt: skip
    return changes


def _bottleneck(
    st: _Loader, share: float, wait: float, site: Site, per_step: bool,
    loader_site: Site | None, cores: int,
) -> Finding:  # fmt: skip
    settings = st.settings
    workers = settings["num_workers"]
    related = []
    getitem = _getitem_site(st.kind)
    if getitem is not None:
        related.append({"file": getitem.file, "line": getitem.line, "what": "__getitem__"})
    if loader_site is not None and (loader_site.file, loader_site.line) != (site.file, site.line):
        related.append({"file": loader_site.file, "line": loader_site.line,
                        "what": "DataLoader"})  # fmt: skip
    return Finding(
        code="data-bottleneck",
        severity="warning",
        file=site.file,
        line=site.line,
        message=f"{share:.0%} of the loop's time is spent waiting for the next batch "
        f"({wait * 1000:.1f} ms per batch) with num_workers={workers}"
        + ("; every batch comes from a new iterator" if per_step else ""),
        why="the model sits idle while batches are prepared: training runs at the speed of "
        "the data pipeline",
        fix="; ".join(_fixes(settings, per_step, cores)),
        related=related,
        evidence={"wait_share": round(share, 3), "wait_ms": round(wait * 1000, 2),
                  "new_iterator_each_batch": per_step, **settings},  # fmt: skip
    )
