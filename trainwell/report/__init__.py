"""Reports of runs: one self-contained HTML page, and the table of runs.

The page opens with no network: plotly.js, the styles and the data are inline. It shows
the run's status, stop reason and headline metrics; interactive curves of every logged
metric (loss, the task's metrics, lr, gradient norm, samples/s, step anatomy); the
memory timeline with the doctor's verdict on it; the doctor's findings; checkpoints,
config and environment. With several runs, the curves are overlaid and a table shows
the config keys that differ and the final and best metrics.

Nothing here imports torch: a report is drawn in a fraction of a second at the end of
every run, and ``trainwell report`` works on a machine without a GPU stack.

Example:
    >>> from trainwell.report import write_report
    >>> write_report(["runs/a", "runs/b"], "compare.html")  # doctest: +SKIP
    PosixPath('compare.html')
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from trainwell.errors import UserError
from trainwell.report.rundata import Run, load_run

__all__ = ["Run", "load_run", "render_report", "write_report", "write_run_report"]


def render_report(paths: Sequence[str | os.PathLike[str]]) -> tuple[str, list[Run]]:
    """The HTML of a report of the run directories ``paths``, and the runs as read.

    Raises :class:`UserError` (one line) for a path that is not a run directory.

    Example:
        >>> render_report(["/"])  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        trainwell.errors.UserError: / is not a run directory (it has no summary.json, ...)
    """
    from trainwell.report.render import render_html

    if not paths:
        raise UserError("report: name at least one run directory")
    runs = [load_run(p) for p in paths]
    _unique_names(runs)
    return render_html(runs), runs


def write_report(paths: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str]) -> Path:
    """Write the report of ``paths`` to ``out`` atomically; returns ``out``.

    Example:
        >>> write_report(["runs/a"], "runs/a/report.html")  # doctest: +SKIP
        PosixPath('runs/a/report.html')
    """
    return write_report_and_runs(paths, out)[0]


def write_report_and_runs(
    paths: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str]
) -> tuple[Path, list[Run]]:
    """:func:`write_report`, also returning the runs as read (their notes, their status)."""
    page, runs = render_report(paths)
    target = Path(out)
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        tmp.write_text(page, encoding="utf-8", errors="backslashreplace")  # odd-byte names
        os.replace(tmp, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise UserError(f"could not write {target}: {exc.strerror or exc}") from None
    return target, runs


def write_run_report(run_dir: Path) -> Path | None:
    """``run_dir/report.html``, written at the end of every run; never raises.

    A failure (bad files, a full disk) returns None after one line on stderr: a report
    that cannot be drawn must never fail the run it describes.

    Example:
        >>> write_run_report(Path("/nonexistent-run")) is None
        True
    """
    try:
        return write_report([run_dir], Path(run_dir) / "report.html")
    except Exception as exc:  # the run's outcome matters more than its report
        print(f"trainwell: warning: no report.html for {run_dir}: {exc}", file=sys.stderr)
        return None


def _unique_names(runs: list[Run]) -> None:
    """Two runs both called ``a`` (in different folders) get their parent in the name."""
    names = [run.name for run in runs]
    for run in runs:
        if names.count(run.name) > 1:
            run.name = f"{run.path.resolve().parent.name}/{run.name}"
