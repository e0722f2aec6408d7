"""The HTML: Jinja2 and the inlined plotly.js when the ``report`` extra is installed, a
plain page (tables, and curves.png inlined) when it is not."""

from __future__ import annotations

import base64
import functools
import html
import importlib.util
from pathlib import Path
from typing import Any

from trainwell.report import templates
from trainwell.report.context import build_context
from trainwell.report.rundata import Run

EXTRA_HINT = "pip install 'trainwell[report]'"


def render_html(runs: list[Run]) -> str:
    """The report page of one run or several compared.

    Example:
        >>> from pathlib import Path
        >>> page = render_html([Run(Path("a"), "a", status="completed")])
        >>> page.startswith("<!DOCTYPE html>") and "completed" in page
        True
    """
    js, page = plotly_js(), _page()
    if js is None or page is None:
        return fallback_html(runs)
    from trainwell import __version__

    ctx = build_context(runs)
    return page.render(
        **ctx, css=templates.CSS, script=templates.SCRIPT, plotly_js=js, version=__version__
    )


@functools.lru_cache(maxsize=1)
def plotly_js() -> str | None:
    """plotly.js from the installed ``plotly`` package (read once), or None without it."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        return None
    # Read the bundle directly: importing plotly.offline would cost more than the page.
    for folder in spec.submodule_search_locations:
        bundle = Path(folder) / "package_data" / "plotly.min.js"
        if bundle.is_file():
            return _safe_script(bundle.read_text(encoding="utf-8"))
    try:
        from plotly.offline import get_plotlyjs
    except ImportError:
        return None
    return _safe_script(get_plotlyjs())


def _safe_script(js: str) -> str:
    # A literal "</script" would end the inline element early.
    return js.replace("</script", "<\\/script")


@functools.lru_cache(maxsize=1)
def _page() -> Any:
    """The page's template, compiled once per process (a tenth of a second per run)."""
    try:
        import jinja2
    except ImportError:
        return None
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    return env.from_string(templates.PAGE)


def fallback_html(runs: list[Run]) -> str:
    """A plain page without plotly/jinja2: the same facts as tables, curves.png inlined.

    Example:
        >>> from pathlib import Path
        >>> "trainwell[report]" in fallback_html([Run(Path("a"), "a")])
        True
    """
    ctx = build_context(runs, charts=False)
    e = html.escape
    parts = [
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{e(ctx['title'])}"
        f"</title><style>{templates.CSS}</style></head><body data-charts-drawn='0'>"
        f"<header><h1>{e(ctx['title'])}</h1><div class='sub'>plain report: interactive "
        f"charts need the report extra ({e(EXTRA_HINT)})</div></header><main>"
    ]
    if ctx["partial"]:
        notes = [ctx["mismatch"]] if ctx["mismatch"] else []
        notes += [f"{r['name']}: {n}" for r in ctx["runs"] for n in r["notes"]]
        parts.append("<div class='banner partial'><b>Partial report.</b>")
        parts += [f"<div>{e(n)}</div>" for n in notes]
        parts.append("</div>")
    if ctx["several"]:
        parts.append("<section><h2>Runs compared</h2>")
        parts.append(_table(ctx["compare"]["columns"], ctx["compare"]["rows"]))
        diff = [[k, *v] for k, v in ctx["compare"]["diff"]]
        parts.append("<h3>Config keys that differ</h3>")
        parts.append(_table(["key", *[r["name"] for r in ctx["runs"]]], diff))
        parts.append("</section>")
    for run, data in zip(ctx["runs"], runs):
        parts.append(_fallback_run(run, data))
    parts.append("</main></body></html>")
    return "\n".join(parts)


def _fallback_run(run: dict[str, Any], data: Run) -> str:
    e = html.escape
    head = [("status", run["status"]), ("stop reason", run["stop_reason"])]
    if run["error"]:
        head.append(("error", run["error"]))
    out = [f"<section><h2>{e(run['name'])}</h2>", _table([], [*head, *run["headline"]])]
    out.append("<h3>Metrics</h3>" + _table(["metric", "value"], run["final"]))
    png = data.path / "curves.png"
    if png.is_file():
        b64 = base64.b64encode(png.read_bytes()).decode()
        out.append(f"<img alt='curves' style='max-width:100%' src='data:image/png;base64,{b64}'>")
    if run["memory"]["text"]:
        out.append(f"<h3>Memory</h3><p>doctor: {e(run['memory']['text'])}</p>")
    out.append("<h3>Doctor findings</h3>")
    for f in run["findings"]:
        out.append(
            f"<div class='finding {e(f['severity'])}'><b>{e(f['severity'])}[{e(f['code'])}]</b>"
            f" {e(f['where'])}<div>{e(f['message'])}</div><div>fix: {e(f['fix'])}</div></div>"
        )
    if not run["findings"]:
        out.append("<p>none</p>" if run["doctor_ran"] else "<p>the doctor did not run</p>")
    rows = [(c["name"], c["step"], c["epoch"], c["metric"], c["size"]) for c in run["checkpoints"]]
    out.append("<h3>Checkpoints</h3>" + _table(["file", "step", "epoch", "metric", "size"], rows))
    out.append(f"<h3>Config</h3><pre>{e(run['config_text'])}</pre>")
    out.append("<h3>Environment</h3>" + _table([], run["env"]) + "</section>")
    return "\n".join(out)


def _table(columns: list[str], rows: list[Any]) -> str:
    e = html.escape
    head = "".join(f"<th>{e(str(c))}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table>{'<tr>' + head + '</tr>' if head else ''}{body}</table>"
