"""What the page shows, as plain strings and rows: shared by the Plotly page and the fallback."""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any

from trainwell.report import compare
from trainwell.report.charts import Chart, build_charts, verdict_text
from trainwell.report.compare import fmt
from trainwell.report.rundata import Run, flatten

SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


def build_context(runs: list[Run], charts: bool = True) -> dict[str, Any]:
    """Everything the templates need, computed once.

    Example:
        >>> from pathlib import Path
        >>> ctx = build_context([Run(Path("a"), "a", status="running")], charts=False)
        >>> ctx["title"], ctx["partial"]
        ('trainwell report: a (running)', True)
    """
    built = build_charts(runs) if charts else []
    names = ", ".join(run.name for run in runs)
    status = runs[0].status if len(runs) == 1 else f"{len(runs)} runs"
    mismatch = compare.task_mismatch(runs)
    columns, rows = compare.metrics_table(runs)
    return {
        "title": f"trainwell report: {names} ({status})",
        "generated": dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S"),
        "runs": [run_context(run) for run in runs],
        "several": len(runs) > 1,
        "partial": any(run.partial for run in runs) or bool(mismatch),
        "mismatch": mismatch,
        "curves": [c for c in built if c.title != "memory"],
        "memory_chart": next((c for c in built if c.title == "memory"), None),
        "figures_json": figures_json(built),
        "compare": {"columns": columns, "rows": rows, "diff": compare.config_diff(runs)},
    }


def run_context(run: Run) -> dict[str, Any]:
    """One run's headline, findings, memory verdict, checkpoints, config and environment."""
    summary = run.summary
    verdict, findings = run.memory_verdict()
    return {
        "name": run.name,
        "path": str(run.path.resolve()),
        "status": run.status,
        "stop_reason": str(summary.get("stop_reason") or _stop_reason(run)),
        "error": str(summary.get("error") or ""),
        "notes": list(run.notes),
        "headline": _headline(run),
        "final": [(k, fmt(v)) for k, v in compare.final_metrics(run).items()],
        "findings": sorted(
            (_finding(f) for f in run.findings), key=lambda f: SEVERITY_ORDER.get(f["severity"], 3)
        ),
        "doctor_ran": run.doctor_ran,
        "memory": {
            "verdict": verdict,
            "text": verdict_text(verdict, findings) if verdict != "unknown" else "",
            "logged": any(s.name.startswith("mem/") for s in run.series.values()),
        },
        "checkpoints": [_checkpoint(c, run) for c in run.checkpoints],
        "config_text": run.config_text,
        "env": [(k, _cell(v)) for k, v in flatten(_env_without_advice(run.env)).items()],
        "advice": [a for a in run.env.get("advice") or [] if isinstance(a, dict)],
    }


def _stop_reason(run: Run) -> str:
    """Why a run without a recorded stop reason stopped: a failed run's own error."""
    if run.status == "failed":
        error = " ".join(str(run.summary.get("error") or "").split())
        return f"failed: {error[:160]}" if error else "failed (no error was recorded)"
    return {"running": "still running", "interrupted": "interrupted",
            "stopped": "stopped without a process (killed)"}.get(run.status, "unknown")  # fmt: skip


def _headline(run: Run) -> list[tuple[str, str]]:
    s = run.summary
    total = s.get("total_steps")
    steps = str(compare.steps_of(run)) + (f" of {total}" if isinstance(total, int) else "")
    device = ""
    if s.get("device"):
        device = f"{s['device']} x {s.get('world_size', 1)}, {s.get('precision', '?')}"
    rows = [
        ("steps", steps),
        ("best", compare.best_text(run) or "none kept"),
        ("wall time", duration(s.get("wall_time_s"))),
        ("samples/s", fmt(s.get("samples_per_s"))),
        ("device", device),
        ("started", str(s.get("started") or "")),
        ("resumed from", str(s.get("resumed_from") or "")),
        ("weights", str(s.get("weights") or "")),
    ]
    # A run still going (or a summary cut short) leaves some unknown: leave those out.
    return [(k, v) for k, v in rows if v and v != "?"]


def duration(seconds: Any) -> str:
    """Seconds as ``0.45 s``, ``2 min 05 s`` or ``1 h 02 min``.

    Example:
        >>> duration(0.454), duration(125), duration(3725), duration(None)
        ('0.45 s', '2 min 05 s', '1 h 02 min', '?')
    """
    if not isinstance(seconds, int | float) or not math.isfinite(seconds):
        return "?"
    if seconds < 60:
        return f"{seconds:.2g} s" if seconds < 10 else f"{seconds:.0f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def _finding(f: dict[str, Any]) -> dict[str, Any]:
    related = [
        f"{r.get('file', '?')}:{r.get('line', '?')}" + (f" ({r['what']})" if r.get("what") else "")
        for r in f["related"]
    ]
    evidence = {k: v for k, v in f["evidence"].items() if k != "samples"}
    return {
        **f,
        "where": f"{f['file']}:{f['line']}",
        "related_text": related,
        "evidence_text": json.dumps(evidence, default=str)[:400] if evidence else "",
    }


def _checkpoint(ckpt: Any, run: Run) -> dict[str, str]:
    monitor = str(run.summary.get("monitor") or (ckpt.best or {}).get("metric") or "")
    value = ckpt.metrics.get(monitor) if monitor else None
    return {
        "name": ckpt.name,
        "step": "?" if ckpt.step is None else str(ckpt.step),
        "epoch": "" if ckpt.epoch is None else str(ckpt.epoch + 1),
        "metric": f"{monitor} {fmt(value)}" if value is not None else "",
        "size": ckpt.size_text,
    }


def _env_without_advice(env: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in env.items() if k != "advice"}


def _cell(value: Any) -> str:
    if isinstance(value, list | dict):
        return json.dumps(value, default=str)
    return "" if value is None else str(value)


def figures_json(charts: list[Chart]) -> str:
    """The charts' figures as JSON safe inside a ``<script>`` element (no ``</``, no NaN)."""
    data = {chart.id: chart.figure for chart in charts}
    text = json.dumps(_finite(data), separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _finite(value: Any) -> Any:
    """NaN and infinities become null (a gap in the curve): JSON has no NaN."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, list):
        if all(type(v) is int for v in value):
            return value  # steps: nothing to clean, skip the walk
        return [_finite(v) for v in value]
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return value
