"""The table of runs under a folder (``trainwell runs``), newest first, and run diffs.

Listing reads only each run's summary.json, doctor.json count and the head of its
config: hundreds of runs list in well under a second.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from trainwell.errors import UserError
from trainwell.printable import printable
from trainwell.report.compare import fmt
from trainwell.report.context import duration
from trainwell.report.rundata import is_run_dir, live_status

COLUMNS = ("name", "status", "best", "steps", "wall", "findings", "resumed")
# How a status reads in the table (JSON keeps the word).
_SHOWN = {"stopped": "stopped (no process)"}
# Metrics where lower is better: --sort puts the lowest first for these.
_LOWER_IS_BETTER = ("loss", "err", "ppl", "perplexity", "mse", "mae", "rmse")


def find_runs(folder: str | os.PathLike[str]) -> list[Path]:
    """``folder`` itself when it is a run, else the run directories directly inside it.

    Example:
        >>> find_runs("/nonexistent")
        Traceback (most recent call last):
        ...
        trainwell.errors.UserError: runs: /nonexistent does not exist
    """
    root = Path(folder)
    if not root.exists():
        raise UserError(f"runs: {root} does not exist")
    if not root.is_dir():
        raise UserError(f"runs: {root} is not a folder")
    if (root / "summary.json").is_file():
        return [root]
    return sorted(p for p in root.iterdir() if p.is_dir() and is_run_dir(p))


def run_row(path: Path) -> dict[str, Any]:
    """One run as a row: name, status, best metric, steps, wall time, findings, resumed."""
    summary = _json(path / "summary.json")
    doctor = _json(path / "doctor.json")
    best = _dict_at(summary, "best")
    findings = doctor.get("findings")
    final = _dict_at(summary, "final")
    return {
        "name": path.name,
        "path": str(path),
        "status": live_status(path, str(summary.get("status", "unknown"))),
        "started": str(summary.get("started", "")),
        "best_metric": best.get("metric"),
        "best_value": best.get("value"),
        "best_step": best.get("step"),
        "steps": summary.get("steps"),
        "wall_time_s": summary.get("wall_time_s"),
        "findings": len(findings) if isinstance(findings, list) else None,
        "resumed": bool(summary.get("resumed_from")),
        "final": {k: v for k, v in final.items() if isinstance(v, int | float)},
        "_mtime": _mtime(path),
    }


def list_runs(folder: str | os.PathLike[str], sort: str | None = None) -> list[dict[str, Any]]:
    """Rows of the runs under ``folder``: newest first, or best first by metric ``sort``.

    Example:
        >>> import tempfile
        >>> list_runs(tempfile.mkdtemp())
        []
    """
    rows = [run_row(p) for p in find_runs(folder)]
    rows.sort(key=lambda r: (r["started"], r["_mtime"]), reverse=True)
    if sort:
        rows = _sorted_by_metric(rows, sort)
    for row in rows:
        del row["_mtime"]
    return rows


def _sorted_by_metric(rows: list[dict[str, Any]], metric: str) -> list[dict[str, Any]]:
    known = {k for r in rows for k in r["final"]} | {r["best_metric"] for r in rows}
    if metric not in known:
        names = ", ".join(sorted(k for k in known if k)) or "none"
        raise UserError(f"runs --sort: no run has metric {metric!r} (metrics: {names})")
    lower = any(word in metric.rsplit("/", 1)[-1] for word in _LOWER_IS_BETTER)

    def key(row: dict[str, Any]) -> tuple[bool, float]:
        value = _metric_value(row, metric)
        if value is None:
            return True, 0.0  # runs without the metric go last
        return False, value if lower else -value

    return sorted(rows, key=key)  # stable: ties stay newest first


def _metric_value(row: dict[str, Any], metric: str) -> float | None:
    """The run's best value of ``metric`` when it is the monitored one, else its final."""
    value = row["best_value"] if row["best_metric"] == metric else row["final"].get(metric)
    if not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def format_table(rows: list[dict[str, Any]]) -> str:
    """The rows as an aligned text table.

    Example:
        >>> print(format_table([{"name": "a", "status": "completed", "best_metric": None,
        ...     "best_value": None, "best_step": None, "steps": 3, "wall_time_s": 1.5,
        ...     "findings": 0, "resumed": False}]))
        name  status     best  steps  wall   findings  resumed
        a     completed  -     3      1.5 s  0         no
    """
    # Names come from folders and files: escape what would drive the terminal.
    cells = [list(COLUMNS)] + [[printable(c) for c in _cells(row)] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    return "\n".join(lines)


def _cells(row: dict[str, Any]) -> list[str]:
    best = "-"
    if row["best_metric"] and isinstance(row["best_value"], int | float):
        best = f"{row['best_metric']} {fmt(row['best_value'])}"
    return [
        row["name"],
        _SHOWN.get(row["status"], row["status"]),
        best,
        "?" if row["steps"] is None else str(row["steps"]),
        duration(row["wall_time_s"]),
        "-" if row["findings"] is None else str(row["findings"]),
        "yes" if row["resumed"] else "no",
    ]


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(errors="replace"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _dict_at(data: dict[str, Any], key: str) -> dict[str, Any]:
    """``data[key]`` when it is an object; ``{}`` when missing or of another kind."""
    value = data.get(key)
    return value if isinstance(value, dict) else {}


def _mtime(path: Path) -> float:
    try:
        return (path / "summary.json").stat().st_mtime
    except OSError:
        return path.stat().st_mtime
