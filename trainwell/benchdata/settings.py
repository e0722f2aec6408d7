"""Loader settings, the measured rows of a sweep, and the rule that picks one.

A :class:`Setting` is the four DataLoader knobs that change speed but never the batches:
``num_workers``, ``pin_memory``, ``persistent_workers`` and ``prefetch_factor``. A
:class:`Row` is a setting with what it measured. :func:`recommend` takes the cheapest row
within 5% of the fastest: fewest workers first, then fewest extras (pinned memory,
persistent workers, a prefetch beyond PyTorch's default), because every worker is a
process with its own copy of the data set and every extra holds memory for nothing when
it does not pay.

Example:
    >>> rows = [Row(Setting(0), 10.0, 0.1), Row(Setting(2), 40.0, 0.5),
    ...         Row(Setting(4), 41.0, 0.9)]
    >>> recommend(rows).setting.num_workers
    2
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

# Rows within this share of the fastest count as just as fast (machine noise is larger).
TOLERANCE = 0.05
# PyTorch's own prefetch_factor with workers: not an extra.
DEFAULT_PREFETCH = 2


@dataclass(frozen=True)
class Setting:
    """The DataLoader knobs a sweep varies.

    ``None`` for ``num_workers`` means "as given": a user's iterable of batches that is
    not a DataLoader, whose knobs cannot be changed. ``prefetch_factor`` is ``None`` with
    no workers (PyTorch refuses one there) and for PyTorch's default.

    Example:
        >>> Setting(2, persistent_workers=True).extras
        1
        >>> Setting(0).overrides()
        ['data.num_workers=0', 'data.pin_memory=false', 'data.persistent_workers=false']
    """

    num_workers: int | None
    pin_memory: bool = False
    persistent_workers: bool = False
    prefetch_factor: int | None = None

    @property
    def extras(self) -> int:
        """How many knobs are on beyond the plain loader (each costs memory or processes)."""
        prefetch = self.prefetch_factor not in (None, DEFAULT_PREFETCH)
        return int(self.pin_memory) + int(self.persistent_workers) + int(prefetch)

    def cost(self) -> tuple[int, int, int]:
        """The sort key of cheapness: workers, then extras, then the prefetch depth."""
        return (self.num_workers or 0, self.extras, self.prefetch_factor or 0)

    def overrides(self, pin: bool = True) -> list[str]:
        """The setting as the ``KEY=VALUE`` overrides of ``trainwell train`` (without
        ``data.pin_memory`` unless ``pin``: it is measured only with CUDA)."""
        out = [f"data.num_workers={self.num_workers}"]
        if pin:
            out.append(f"data.pin_memory={_yaml(self.pin_memory)}")
        out.append(f"data.persistent_workers={_yaml(self.persistent_workers)}")
        if self.prefetch_factor is not None:
            out.append(f"data.prefetch_factor={self.prefetch_factor}")
        return out

    def describe(self) -> str:
        """A short human label, e.g. ``2 workers, persistent, prefetch 4``."""
        if self.num_workers is None:
            return "as given"
        parts = [f"{self.num_workers} worker{'' if self.num_workers == 1 else 's'}"]
        if self.pin_memory:
            parts.append("pinned")
        if self.persistent_workers:
            parts.append("persistent")
        if self.prefetch_factor is not None:
            parts.append(f"prefetch {self.prefetch_factor}")
        return ", ".join(parts)


def rate_text(per_s: float) -> str:
    """A rate for people: three significant figures, no exponent.

    Example:
        >>> rate_text(3824.4), rate_text(20.34), rate_text(0.512)
        ('3,824', '20.3', '0.512')
    """
    if per_s >= 100:
        return f"{per_s:,.0f}"
    return f"{per_s:.3g}"


def _yaml(flag: bool) -> str:
    return "true" if flag else "false"


@dataclass
class Row:
    """One measured setting.

    Attributes:
        setting: what was measured.
        batches_per_s: steady-state batches per second, the first batch and the batches
            the workers had prefetched meanwhile left out (0 when none came after it).
        first_batch_s: seconds from asking for the first batch to having it (worker
            start-up included).
        peak_rss_mb: the largest resident memory of this process and its children seen
            while measuring (shared pages count once per process), ``None`` where the
            system does not say.
        batches: batches drawn in all.
    """

    setting: Setting
    batches_per_s: float
    first_batch_s: float
    peak_rss_mb: float | None = None
    batches: int = 0

    def to_json(self) -> dict[str, Any]:
        """The row as the ``--json`` contract writes it.

        Example:
            >>> sorted(Row(Setting(1), 5.0, 0.2).to_json())  # doctest: +NORMALIZE_WHITESPACE
            ['batches_per_s', 'first_batch_s', 'num_workers', 'peak_rss_mb',
             'persistent_workers', 'pin_memory', 'prefetch_factor']
        """
        return {
            **asdict(self.setting),
            "batches_per_s": _finite(self.batches_per_s),
            "first_batch_s": _finite(self.first_batch_s),
            "peak_rss_mb": None if self.peak_rss_mb is None else round(self.peak_rss_mb, 1),
        }


def _finite(x: float) -> float | None:
    return round(x, 4) if math.isfinite(x) else None


def recommend(rows: list[Row], tolerance: float = TOLERANCE) -> Row:
    """The cheapest row whose batches/s is within ``tolerance`` of the fastest.

    Cheapest is fewest workers, then fewest extras, then the shallowest prefetch; among
    equals, the faster one.

    Example:
        >>> rows = [Row(Setting(1), 96.0, 0.1), Row(Setting(1, persistent_workers=True), 100.0,
        ...         0.1), Row(Setting(2), 60.0, 0.2)]
        >>> recommend(rows).setting.describe()
        '1 worker'
        >>> recommend(rows, tolerance=0.01).setting.describe()
        '1 worker, persistent'
    """
    if not rows:
        raise ValueError("no rows to recommend from")
    best = max(row.batches_per_s for row in rows)
    near = [row for row in rows if row.batches_per_s >= (1 - tolerance) * best]
    return min(near, key=lambda row: (row.setting.cost(), -row.batches_per_s))


def worker_counts(cores: int) -> list[int]:
    """The ``num_workers`` values to try on ``cores`` usable cores: every count up to 4,
    then about 1.5x apart, the core count last.

    Example:
        >>> worker_counts(2), worker_counts(16)
        ([0, 1, 2], [0, 1, 2, 3, 4, 6, 8, 12, 16])
    """
    cores = max(cores, 1)
    counts = list(range(min(cores, 4) + 1))
    step = 6
    while step < cores:
        counts.append(step)
        step = step + step // 3 if step % 3 == 0 else step + step // 2
    if counts[-1] != cores:
        counts.append(cores)
    return counts


def extras_to_try(base: Setting, cuda: bool) -> list[Setting]:
    """The extras tried one at a time on top of ``base``: pinned memory (with CUDA only),
    persistent workers and a deeper prefetch (with workers only).

    Example:
        >>> [s.describe() for s in extras_to_try(Setting(2), cuda=False)]
        ['2 workers, persistent', '2 workers, prefetch 4']
    """
    out = []
    if cuda and not base.pin_memory:
        out.append(Setting(base.num_workers, True, base.persistent_workers, base.prefetch_factor))
    if base.num_workers:
        if not base.persistent_workers:
            out.append(Setting(base.num_workers, base.pin_memory, True, base.prefetch_factor))
        out.append(Setting(base.num_workers, base.pin_memory, base.persistent_workers,
                           2 * (base.prefetch_factor or DEFAULT_PREFETCH)))  # fmt: skip
    return out
