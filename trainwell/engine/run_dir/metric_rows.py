"""The run's metric rows: appended to ``metrics.csv`` at every log point, not kept.

A run logs a few rows per log point for as long as it trains; keeping them all cost
about 0.4 KB per step (half a gigabyte at 200k steps) and left metrics.csv unwritten
until the epoch's end. :class:`MetricRows` holds only the rows logged since the last
flush (one log point's, or an evaluation's) and a count; whatever needs the history (the
curves, a resumed TensorBoard, the report) reads it back from the file.

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> path = Path(tempfile.mkdtemp()) / "metrics.csv"
    >>> _ = path.write_text("step,epoch,split,name,value\\n")
    >>> rows = MetricRows(path)
    >>> rows.append((1, 0, "train", "loss", 0.5)); rows.flush()
    >>> rows.append((2, 0, "train", "loss", 0.25))
    >>> len(rows), rows.held, list(rows)
    (2, 1, [(1, 0, 'train', 'loss', 0.5), (2, 0, 'train', 'loss', 0.25)])
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

Row = tuple[int, int, str, str, float]
HEADER = ["step", "epoch", "split", "name", "value"]


class MetricRows:
    """Rows of ``metrics.csv``: ``append`` notes one, ``flush`` appends the noted ones to
    the file and forgets them; ``len`` counts every row of the run (what a checkpoint
    records, for an exact resume), iterating reads the file and then the unflushed rows.
    ``path=None`` (ranks other than 0) holds nothing and writes nothing."""

    def __init__(self, path: Path | None, count: int = 0) -> None:
        self.path = path
        self.count = count  # rows of the run so far: in the file and pending
        self.pending: list[Row] = []

    def append(self, row: Row) -> None:
        self.pending.append(row)
        self.count += 1

    @property
    def held(self) -> int:
        """Rows in memory now: those logged since the last flush."""
        return len(self.pending)

    def flush(self) -> None:
        """Append the pending rows to the file (one open and write); raises ``OSError``."""
        if not self.pending or self.path is None:
            self.pending.clear()
            return
        with open(self.path, "a", newline="") as f:
            csv.writer(f).writerows(self.pending)
        self.pending.clear()

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return self.count > 0

    def __iter__(self) -> Iterator[Row]:
        """Every row of the run, oldest first: the file's, then the pending ones."""
        if self.path is not None and self.path.is_file():
            yield from read_rows(self.path, limit=self.count - len(self.pending))
        yield from list(self.pending)


def read_rows(path: Path, limit: int | None = None) -> Iterator[Row]:
    """The rows of a ``metrics.csv`` (its first ``limit``), typed.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "metrics.csv"
        >>> _ = path.write_text("step,epoch,split,name,value\\n3,0,val,loss,0.5\\n")
        >>> list(read_rows(path))
        [(3, 0, 'val', 'loss', 0.5)]
    """
    with open(path, newline="") as f:
        for i, row in enumerate(csv.DictReader(f)):
            if limit is not None and i >= limit:
                return
            yield (int(row["step"]), int(row["epoch"]), row["split"], row["name"],
                   float(row["value"]))  # fmt: skip
