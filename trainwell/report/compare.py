"""Runs side by side: the config keys that differ, final and best metrics, task checks."""

from __future__ import annotations

from typing import Any

from trainwell.report.rundata import Run, flatten

# Always different between two runs, and saying nothing about how they trained.
IGNORED_KEYS = ("run.dir",)
# What defines the task: runs that differ here are not comparable curve for curve.
TASK_KEYS = ("data.name", "model.name", "data.num_classes", "train.loss", "train.step")
_MISSING = "(not set)"


def config_diff(runs: list[Run]) -> list[tuple[str, list[str]]]:
    """``[(key, [value in run 1, value in run 2, ...])]`` for every key that differs.

    Example:
        >>> from pathlib import Path
        >>> a = Run(Path("a"), "a", config={"optim": {"lr": 0.1}, "run": {"dir": "a"}})
        >>> b = Run(Path("b"), "b", config={"optim": {"lr": 0.01}, "run": {"dir": "b"}})
        >>> config_diff([a, b])
        [('optim.lr', ['0.1', '0.01'])]
    """
    flat = [flatten(run.config) for run in runs]
    keys = sorted({key for f in flat for key in f} - set(IGNORED_KEYS))
    rows = []
    for key in keys:
        values = [_show(f[key]) if key in f else _MISSING for f in flat]
        if len(set(values)) > 1:
            rows.append((key, values))
    return rows


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def task_mismatch(runs: list[Run]) -> str:
    """One line when the runs train different tasks (curves then do not compare).

    Example:
        >>> from pathlib import Path
        >>> a = Run(Path("a"), "a", config={"data": {"name": "digits"}})
        >>> b = Run(Path("b"), "b", config={"data": {"name": "synthetic"}})
        >>> task_mismatch([a, b])  # doctest: +ELLIPSIS
        'these runs train different tasks (data.name: digits, synthetic): their curves...'
    """
    if len(runs) < 2:
        return ""
    flat = [flatten(run.config) for run in runs]
    differing = []
    for key in TASK_KEYS:
        values = [_show(f.get(key, _MISSING)) for f in flat]
        if len(set(values)) > 1:
            differing.append(f"{key}: {', '.join(dict.fromkeys(values))}")
    metrics = [set(run.series) for run in runs]
    if not differing and metrics and all(metrics) and not set.intersection(*metrics):
        differing.append("no metric in common")
    if not differing:
        return ""
    return (
        f"these runs train different tasks ({'; '.join(differing)}): their curves are "
        "overlaid but do not compare"
    )


def metrics_table(runs: list[Run]) -> tuple[list[str], list[list[str]]]:
    """Columns and rows: each run's status, steps, best, and final value of every metric.

    Final values come from summary.json, or from the last logged row for a run that did
    not finish.

    Example:
        >>> from pathlib import Path
        >>> a = Run(Path("a"), "a", status="completed", summary={"final": {"val/loss": 0.5}})
        >>> metrics_table([a])
        (['run', 'status', 'steps', 'best', 'val/loss'], [['a', 'completed', '?', '', '0.5']])
    """
    finals = [final_metrics(run) for run in runs]
    names = list(dict.fromkeys(name for f in finals for name in f))
    columns = ["run", "status", "steps", "best", *names]
    rows = []
    for run, final in zip(runs, finals):
        cells = [run.name, run.status, str(steps_of(run)), best_text(run)]
        cells += [fmt(final[name]) if name in final else "" for name in names]
        rows.append(cells)
    return columns, rows


def final_metrics(run: Run) -> dict[str, float]:
    """summary.json's final metrics, or the last logged value of each (lr and mem/ aside)."""
    final = run.summary.get("final")
    if isinstance(final, dict) and final:
        return {str(k): v for k, v in final.items() if isinstance(v, int | float)}
    return {
        key: value
        for key, value in run.latest().items()
        if not key.endswith("/lr") and "/mem/" not in key and "/time/" not in key
    }


def steps_of(run: Run) -> int | str:
    """Optimizer steps taken: the summary's count, else the last logged step."""
    steps = run.summary.get("steps")
    if isinstance(steps, int):
        return steps
    logged = [s.steps[-1] for s in run.series.values() if s.steps]
    return max(logged) if logged else "?"


def best_text(run: Run) -> str:
    """``val/accuracy 0.9667 @ step 38``, or an empty string."""
    best = run.summary.get("best")
    if not isinstance(best, dict) or not isinstance(best.get("value"), int | float):
        return ""
    return f"{best.get('metric', '?')} {fmt(best['value'])} @ step {best.get('step', '?')}"


def fmt(value: Any) -> str:
    """A metric value in at most 4 significant digits.

    Example:
        >>> fmt(0.96666), fmt(1234567.0), fmt(None)
        ('0.9667', '1.235e+06', '')
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "" if value is None else str(value)
    return f"{value:.4g}"
