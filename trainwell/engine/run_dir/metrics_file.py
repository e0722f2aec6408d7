"""Reading ``metrics.csv`` back when a run resumes, whatever became of it.

The checkpoint counts the rows logged before it (``log_rows``); it does not hold them.
A file deleted, cut short, or with garbage in it cannot give them all back: every row
that still reads is kept, what is lost is said in one line, and the file as found is
kept beside it (``metrics.csv.damaged``), so no history disappears silently.
"""

from __future__ import annotations

import csv
import errno
from pathlib import Path

from trainwell.errors import UserError

HEADER = "step,epoch,split,name,value"
Row = tuple[int, int, str, str, float]


def kept_rows(path: Path, keep_rows: int) -> tuple[list[Row], str | None]:
    """The first ``keep_rows`` rows of ``path`` that still read, and a line saying what
    was lost (``None`` when nothing was).

    Example:
        >>> import tempfile
        >>> p = Path(tempfile.mkdtemp()) / "metrics.csv"
        >>> _ = p.write_text("step,epoch,split,name,value\\n1,0,train,loss,0.5\\n2,0,tra")
        >>> rows, note = kept_rows(p, 2)
        >>> rows, note.split(":")[0]
        ([(1, 0, 'train', 'loss', 0.5)], 'metrics.csv was damaged')
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raw = None
    except OSError as exc:
        code = errno.errorcode.get(exc.errno or 0, str(exc.errno))
        raise UserError(f"cannot read {path}: {exc.strerror or exc} ({code}); nothing was "
                        "changed") from None  # fmt: skip
    if not raw:  # deleted, or emptied
        return [], _missing_note(keep_rows, raw) if keep_rows else None
    lines = raw.decode("utf-8", errors="replace").split("\n")
    lines.pop()  # after the last newline: "" or a row a crash cut short
    header = bool(lines) and lines[0].strip() == HEADER
    data = lines[1:] if header else lines
    rows = [row for row in map(_parse, data[:keep_rows]) if row is not None]
    if len(rows) == keep_rows:
        return rows, None
    _keep_as_found(path, raw)
    return rows, _damaged_note(rows, keep_rows, unreadable=min(len(data), keep_rows) - len(rows))


def _parse(line: str) -> Row | None:
    try:
        fields = next(csv.reader([line]))
        if len(fields) != 5:
            return None
        step, epoch, split, name, value = fields
        return int(step), int(epoch), split, name, float(value)
    except (ValueError, csv.Error, StopIteration):
        return None


def _keep_as_found(path: Path, raw: bytes) -> None:
    with open(path.with_name(path.name + ".damaged"), "wb") as f:
        f.write(raw)


def _missing_note(keep_rows: int, raw: bytes | None) -> str:
    state = "missing" if raw is None else "empty"
    return (
        f"metrics.csv was {state}: the {keep_rows} metric rows logged before the checkpoint "
        "are lost (the checkpoint counts them, it does not hold them); it starts again "
        "from the checkpoint's step"
    )


def _damaged_note(rows: list[Row], keep_rows: int, unreadable: int) -> str:
    missing = keep_rows - len(rows) - unreadable
    lost = []
    if unreadable:
        lost.append(f"{unreadable} unreadable row{'s' * (unreadable != 1)}")
    if missing:
        after = f" after step {rows[-1][0]}" if rows else ""
        lost.append(f"{missing} row{'s' * (missing != 1)} it no longer holds (cut short{after})")
    return (
        f"metrics.csv was damaged: kept {len(rows)} of the {keep_rows} metric rows the "
        f"checkpoint counts, lost {' and '.join(lost)}; the file as found is kept in "
        "metrics.csv.damaged"
    )
