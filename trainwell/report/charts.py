"""Plotly figure specs (plain dicts, drawn by the inlined plotly.js) from runs' metrics.

Specs are built as JSON-ready dicts rather than ``plotly.graph_objects`` figures: the
page needs only the data and the layout, and skipping the Python object layer keeps a
report of a small run well under a second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from trainwell.report.rundata import Run, Series

# Chart order on the page: loss, the task's metrics, then the engine's own figures.
_SPECIAL = {
    "loss": (0, "loss", "loss"),
    "lr": (2, "learning rate", "lr"),
    "grad_norm": (3, "gradient norm", "norm"),
    "samples_per_s": (4, "throughput", "samples/s"),
    "time": (5, "step anatomy", "fraction of step time"),
    "step_ms": (6, "step time", "ms per optimizer step"),
    "mem": (7, "memory", "MB"),
}
_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf")  # fmt: skip
_DASH = {"train": "solid", "val": "dash", "test": "dot"}
# With several runs a colour is a run: the split is the dash and the marker's shape, so that
# a run's val and test points (often one each) can be told apart.
_SYMBOL = {"train": "circle", "val": "diamond", "test": "star"}
VERDICT_COLORS = {"leak": "#d62728", "fragmentation": "#ff7f0e", "clean": "#2ca02c"}


@dataclass
class Chart:
    """One chart of the page: its id, title, and the Plotly figure to draw."""

    id: str
    title: str
    figure: dict[str, Any] = field(default_factory=dict)
    note: str = ""


def group_of(series: Series) -> str:
    """The chart a series goes to: ``loss``, ``lr``, ``time`` (the step's shares),
    ``step_ms``, ``mem``, or its own name.

    Example:
        >>> group_of(Series("train", "time/data")), group_of(Series("val", "accuracy"))
        ('time', 'accuracy')
        >>> group_of(Series("train", "time/step_ms"))
        'step_ms'
    """
    name = series.name
    if name == "time/step_ms":  # milliseconds: not a share to stack with the others
        return "step_ms"
    if "/" in name:
        return name.split("/", 1)[0] if name.split("/", 1)[0] in _SPECIAL else name
    if name in ("grad_norm", "gradnorm", "grad-norm"):
        return "grad_norm"
    return name


def build_charts(runs: list[Run]) -> list[Chart]:
    """One chart per group of series, every run overlaid on it.

    Example:
        >>> from pathlib import Path
        >>> run = Run(Path("r"), "r", series={"train/loss": Series("train", "loss", [1], [2.0])})
        >>> [c.title for c in build_charts([run])]
        ['loss']
    """
    groups: dict[str, list[tuple[int, Run, Series]]] = {}
    for index, run in enumerate(runs):
        for series in run.series.values():
            if series.values:
                groups.setdefault(group_of(series), []).append((index, run, series))
    charts = []
    for n, group in enumerate(sorted(groups, key=_order)):
        order, title, ytitle = _SPECIAL.get(group, (1, group, group))
        entries = groups[group]
        traces = [_trace(run, s, i, len(runs), group, j) for j, (i, run, s) in enumerate(entries)]
        traces += [t for t in (_nonfinite(tr) for tr in traces) if t is not None]
        layout = _layout(ytitle, traces, group)
        chart = Chart(f"chart-{n}", title, {"data": traces, "layout": layout})
        if group == "mem":
            _second_axis(chart)
            _mark_verdicts(chart, runs)
        charts.append(chart)
    return charts


def _order(group: str) -> tuple[int, str]:
    return _SPECIAL.get(group, (1, group, group))[0], group


def _trace(run: Run, series: Series, index: int, n_runs: int, group: str, j: int) -> dict:
    name = series.key if n_runs == 1 else f"{run.name} · {series.key}"
    # One run: a colour per series. Several: a colour per run, the split as the dash.
    color = _COLORS[(j if n_runs == 1 else index) % len(_COLORS)]
    few = len(series.steps) <= 1 or series.split == "test"
    trace: dict[str, Any] = {
        "type": "scatter",
        "name": name,
        "x": series.steps,
        "y": series.values,
        "mode": "markers" if few else ("lines+markers" if len(series.steps) <= 60 else "lines"),
        "line": {"color": color, "dash": _DASH.get(series.split, "solid")},
        "marker": {"color": color, "size": 9 if few else 5,
                   "symbol": _SYMBOL.get(series.split, "circle")},  # fmt: skip
        "hovertemplate": "%{y:.5g}<extra>" + name + "</extra>",
    }
    if group == "time" and n_runs == 1:
        # Fractions of a step: stacked, they show where the step's time goes.
        trace.update(stackgroup="anatomy", mode="lines", fill="tonexty")
    return trace


def _nonfinite(trace: dict[str, Any]) -> dict[str, Any] | None:
    """NaN/Inf values as red crosses where the curve stops (JSON and Plotly have no NaN).

    Example:
        >>> _nonfinite({"name": "loss", "x": [1, 2, 3], "y": [2.0, float("nan"), 1.0]})["x"]
        [2]
    """
    bad = [x for x, y in zip(trace["x"], trace["y"]) if not math.isfinite(y)]
    if not bad:
        return None
    last, ys = 0.0, []
    for x, y in zip(trace["x"], trace["y"]):
        if math.isfinite(y):
            last = y
        elif x in bad:
            ys.append(last)  # drawn at the last finite value: where the curve broke off
    return {
        "type": "scatter", "name": f"{trace['name']}: NaN/Inf", "x": bad, "y": ys,
        "mode": "markers", "marker": {"color": "#d62728", "symbol": "x", "size": 10},
        "hovertemplate": "NaN/Inf at step %{x}<extra></extra>",
    }  # fmt: skip


def _layout(ytitle: str, traces: list[dict], group: str) -> dict[str, Any]:
    layout: dict[str, Any] = {
        "height": 320,
        "margin": {"l": 64, "r": 16, "t": 16, "b": 48},
        "xaxis": {"title": {"text": "optimizer step"}, "zeroline": False},
        "yaxis": {"title": {"text": ytitle}, "zeroline": False},
        "hovermode": "x unified",
        "legend": {"orientation": "h", "y": -0.22},
        "paper_bgcolor": "#ffffff",
        "plot_bgcolor": "#fbfbfd",
        "font": {"family": "system-ui, sans-serif", "size": 12},
    }
    values = [v for t in traces for v in t["y"] if isinstance(v, int | float)]
    positive = [v for v in values if v > 0]
    # A loss falling over decades, or a warmup from ~0: a log axis shows the shape.
    all_positive = positive and len(positive) == len(values)
    if group in ("loss", "lr") and all_positive and max(positive) / min(positive) > 100:
        layout["yaxis"]["type"] = "log"
    return layout


def _second_axis(chart: Chart) -> None:
    """Live tensor bytes on their own axis: next to the process RSS they would look flat."""
    traces = chart.figure["data"]
    small = [t for t in traces if t["name"].endswith("/mem/tensor_mb")]
    if not small or len(small) == len(traces):
        return
    for trace in small:
        trace["yaxis"] = "y2"
    chart.figure["layout"]["yaxis"]["title"]["text"] = "MB (process)"
    chart.figure["layout"]["yaxis2"] = {
        "title": {"text": "MB (live tensors)"}, "overlaying": "y", "side": "right",
        "zeroline": False, "showgrid": False, "rangemode": "tozero",
    }  # fmt: skip
    chart.figure["layout"]["margin"]["r"] = 64


def _mark_verdicts(chart: Chart, runs: list[Run]) -> None:
    """The doctor's memory verdict on the timeline: a band, a label, the step if known."""
    layout = chart.figure["layout"]
    annotations: list[dict[str, Any]] = []
    shapes: list[dict[str, Any]] = []
    lines: list[str] = []
    for run in runs:
        verdict, findings = run.memory_verdict()
        if verdict == "unknown":
            continue
        prefix = f"{run.name}: " if len(runs) > 1 else ""
        text = f"{prefix}doctor: {verdict_text(verdict, findings)}"
        lines.append(text)
        color = VERDICT_COLORS[verdict]
        annotations.append({
            "xref": "paper", "yref": "paper", "x": 0, "y": 1.02 + 0.1 * len(annotations),
            "xanchor": "left", "yanchor": "bottom", "showarrow": False, "text": text,
            "font": {"color": color, "size": 13}, "bgcolor": "rgba(255,255,255,0.85)",
            "bordercolor": color, "borderwidth": 1,
        })  # fmt: skip
        if verdict != "clean":
            shapes.append({
                "type": "rect", "xref": "paper", "yref": "paper", "x0": 0, "x1": 1,
                "y0": 0, "y1": 1, "fillcolor": color, "opacity": 0.06, "line": {"width": 0},
            })  # fmt: skip
        for finding in findings:
            step = finding["evidence"].get("step")
            if isinstance(step, int | float):
                shapes.append({
                    "type": "line", "xref": "x", "yref": "paper", "x0": step, "x1": step,
                    "y0": 0, "y1": 1, "line": {"color": color, "dash": "dot", "width": 2},
                })  # fmt: skip
    layout["annotations"], layout["shapes"] = annotations, shapes
    # Room above the plot for the verdicts, one line each.
    layout["margin"]["t"] = 16 + 30 * len(annotations)
    layout["height"] = 320 + 30 * len(annotations)
    chart.note = "; ".join(lines)


def verdict_text(verdict: str, findings: list[dict[str, Any]]) -> str:
    """The verdict in a few words, naming the first finding's code and line.

    Example:
        >>> verdict_text("leak", [{"code": "graph-retained", "file": "t.py", "line": 3}])
        'leak (graph-retained at t.py:3)'
        >>> verdict_text("clean", [])
        'no memory leak or fragmentation found'
    """
    if verdict == "clean":
        return "no memory leak or fragmentation found"
    first = findings[0]
    where = f"{first['code']} at {first['file']}:{first['line']}"
    more = f" and {len(findings) - 1} more" if len(findings) > 1 else ""
    return f"{verdict} ({where}{more})"
