"""The report's Jinja2 template, stylesheet and script (Python strings: shipped as code).

Nothing here names a URL: the page must open with no network, so styles, script and
fonts are all inline or the system's own.
"""

from __future__ import annotations

CSS = """
:root { --fg:#1d2330; --muted:#5d6678; --line:#e2e5ec; --bg:#f5f6f9; --card:#fff;
  --ok:#1e8e3e; --bad:#c5221f; --warn:#b06000; --run:#1967d2; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif;
  color:var(--fg); background:var(--bg); }
header { background:#1d2330; color:#fff; padding:14px 24px; }
header h1 { margin:0; font-size:19px; font-weight:600; }
header .sub { color:#b9c0cf; font-size:12px; }
main { padding:16px 24px 40px; max-width:1500px; margin:auto; }
section { background:var(--card); border:1px solid var(--line); border-radius:8px;
  padding:12px 16px; margin:0 0 16px; }
h2 { font-size:16px; margin:2px 0 10px; }
h3 { font-size:14px; margin:10px 0 6px; }
h3.first { margin-top:0; }
table { border-collapse:collapse; font-size:13px; }
td, th { border-bottom:1px solid var(--line); padding:4px 10px 4px 0; text-align:left;
  vertical-align:top; }
th { color:var(--muted); font-weight:600; }
td.num { font-variant-numeric:tabular-nums; }
.badge { display:inline-block; padding:1px 9px; border-radius:10px; color:#fff;
  font-size:12px; font-weight:600; text-transform:uppercase; letter-spacing:.03em; }
.status-completed { background:var(--ok); } .status-failed { background:var(--bad); }
.status-interrupted { background:var(--warn); } .status-running { background:var(--run); }
.status-unknown, .status-stopped { background:#777; }
.banner { border-radius:8px; padding:10px 14px; margin:0 0 16px; border:1px solid; }
.banner.partial { background:#fff8e1; border-color:#f0c36d; }
.banner.error { background:#fdecea; border-color:#f5b7b1; }
.grid { display:grid; grid-template-columns:repeat(auto-fit, minmax(520px, 1fr)); gap:12px; }
.chart-box { border:1px solid var(--line); border-radius:6px; padding:6px 8px; }
.chart-box h3 { margin:2px 0 0; }
.cards { display:flex; flex-wrap:wrap; gap:16px; }
.cards > div { min-width:260px; }
.finding { border-left:4px solid #999; padding:6px 10px; margin:8px 0; background:#fafbfc; }
.finding.error { border-color:var(--bad); } .finding.warning { border-color:var(--warn); }
.finding.info { border-color:var(--run); }
.finding .code { font-weight:600; } .finding .where { font-family:ui-monospace, monospace; }
.muted { color:var(--muted); }
.verdict { font-weight:600; padding:6px 10px; border-radius:6px; display:inline-block; }
.verdict-leak { background:#fdecea; color:var(--bad); }
.verdict-fragmentation { background:#fff4e5; color:var(--warn); }
.verdict-clean { background:#e6f4ea; color:var(--ok); }
pre { background:#f7f8fa; border:1px solid var(--line); padding:8px; overflow:auto;
  font-size:12px; max-height:480px; }
details > summary { cursor:pointer; font-weight:600; margin:4px 0; }
.diff td:first-child { font-family:ui-monospace, monospace; }
#tw-chart-errors:empty { display:none; }
"""

SCRIPT = """
(function () {
  var errors = document.getElementById('tw-chart-errors');
  function fail(id, err) {
    var msg = 'trainwell report: chart ' + id + ' could not be drawn: ' + err;
    errors.textContent += msg + '\\n';
    console.error(msg);
  }
  var figures = JSON.parse(document.getElementById('tw-figures').textContent);
  var config = {displaylogo: false, responsive: true};
  var drawing = Object.keys(figures).map(function (id) {
    try {
      return Plotly.newPlot(id, figures[id].data, figures[id].layout, config)
        .catch(function (err) { fail(id, err); });
    } catch (err) { fail(id, err); return Promise.resolve(); }
  });
  // Tests and scripts wait for this attribute: every chart has been drawn (or failed).
  Promise.all(drawing).then(function () {
    document.body.setAttribute('data-charts-drawn', String(drawing.length));
  });
})();
"""

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ title }}</title>
<style>{{ css|safe }}</style>
</head>
<body data-charts-drawn="0">
<header><h1>{{ title }}</h1>
<div class="sub">generated {{ generated }} by trainwell {{ version }}</div></header>
<main>
{% if partial %}<div class="banner partial"><b>Partial report.</b>
{% if mismatch %}<div>{{ mismatch }}</div>{% endif %}
{% for run in runs %}{% if run.status == "running" %}<div>{{ run.name }}: still running;
this shows what it had written so far.</div>{% endif %}
{% for note in run.notes %}<div>{{ run.name }}: {{ note }}</div>{% endfor %}{% endfor %}
</div>{% endif %}
<div id="tw-chart-errors" class="banner error"></div>

{% if several %}<section id="compare"><h2>Runs compared</h2>
<table class="metrics"><tr>{% for c in compare.columns %}<th>{{ c }}</th>{% endfor %}</tr>
{% for row in compare.rows %}<tr>{% for cell in row %}<td class="num">{% if loop.index == 2
%}<span class="badge status-{{ cell }}">{{ cell }}</span>{% else %}{{ cell }}{% endif
%}</td>{% endfor %}</tr>{% endfor %}</table>
<h3>Config keys that differ</h3>
{% if compare.diff %}<table class="diff"><tr><th>key</th>{% for run in runs %}<th>{{ run.name
}}</th>{% endfor %}</tr>{% for key, values in compare.diff %}<tr><td>{{ key }}</td>{% for v in
values %}<td>{{ v }}</td>{% endfor %}</tr>{% endfor %}</table>
{% else %}<p class="muted">none: the configs are the same (run.dir aside)</p>{% endif %}
</section>{% endif %}

<section id="summary"><h2>Summary</h2><div class="cards">
{% for run in runs %}<div class="run-card">
<h3>{{ run.name }} <span class="badge status-{{ run.status }}">{{ run.status }}</span></h3>
<div class="muted">{{ run.path }}</div>
<div class="cards"><div><table>
<tr><th>stop reason</th><td>{{ run.stop_reason }}</td></tr>
{% if run.error %}<tr><th>error</th><td>{{ run.error }}</td></tr>{% endif %}
{% for k, v in run.headline %}<tr><th>{{ k }}</th><td class="num">{{ v }}</td></tr>{% endfor %}
</table></div>
{% if run.final %}<div><h3 class="first">{{ "final metrics" if run.status != "running"
else "latest metrics" }}</h3>
<table class="metrics">{% for k, v in run.final %}<tr><th>{{ k }}</th><td class="num">{{ v
}}</td></tr>{% endfor %}</table></div>{% endif %}</div>
</div>{% endfor %}</div></section>

<section id="curves"><h2>Curves</h2>
{% if curves %}<div class="grid">{% for c in curves %}<div class="chart-box">
<h3>{{ c.title }}</h3><div id="{{ c.id }}" class="tw-chart"></div></div>{% endfor %}</div>
<p class="muted">Hover for values; drag to zoom, double-click to reset.</p>
{% else %}<p class="muted">no metrics were logged yet</p>{% endif %}
</section>

<section id="memory"><h2>Memory</h2>
{% for run in runs %}{% if run.memory.text %}<p><span class="verdict verdict-{{
run.memory.verdict }}">{% if several %}{{ run.name }}: {% endif %}doctor: {{ run.memory.text
}}</span></p>{% endif %}{% endfor %}
{% if memory_chart %}<div class="chart-box"><div id="{{ memory_chart.id }}" class="tw-chart">
</div></div>{% else %}<p class="muted">no memory figures (mem/... rows) in metrics.csv</p>
{% endif %}
</section>

{% for run in runs %}<section class="run-details" id="run-{{ loop.index }}">
<h2>{% if several %}{{ run.name }}: {% endif %}doctor findings</h2>
{% if run.findings %}{% for f in run.findings %}<div class="finding {{ f.severity }}">
<div><span class="code">{{ f.severity }}[{{ f.code }}]</span>
<span class="where">{{ f.where }}</span></div>
<div>{{ f.message }}</div>
{% if f.why %}<div><b>why it matters:</b> {{ f.why }}</div>{% endif %}
{% for r in f.related_text %}<div class="muted">related: {{ r }}</div>{% endfor %}
<div><b>fix:</b> {{ f.fix }}</div>
{% if f.evidence_text %}<div class="muted">evidence: {{ f.evidence_text }}</div>{% endif %}
</div>{% endfor %}
{% elif run.doctor_ran %}<p>The doctor watched this run and found nothing.</p>
{% else %}<p class="muted">no doctor.json: the doctor did not run</p>{% endif %}

<h3>Checkpoints</h3>
{% if run.checkpoints %}<table><tr><th>file</th><th>step</th><th>epoch</th><th>metric</th>
<th>size</th></tr>{% for c in run.checkpoints %}<tr><td>{{ c.name }}</td><td class="num">{{
c.step }}</td><td class="num">{{ c.epoch }}</td><td class="num">{{ c.metric }}</td>
<td class="num">{{ c.size }}</td></tr>{% endfor %}</table>
{% else %}<p class="muted">no checkpoints</p>{% endif %}

<details><summary>Config (config.yaml)</summary><pre>{{ run.config_text }}</pre></details>
<details><summary>Environment (env.json)</summary>
{% for a in run.advice %}<div class="finding {{ a.severity }}"><b>{{ a.code }}</b>: {{
a.message }}{% if a.fix %} <b>fix:</b> {{ a.fix }}{% endif %}</div>{% endfor %}
<table>{% for k, v in run.env %}<tr><th>{{ k }}</th><td>{{ v }}</td></tr>{% endfor %}
</table></details>
</section>{% endfor %}
</main>
<script>{{ plotly_js|safe }}</script>
<script type="application/json" id="tw-figures">{{ figures_json|safe }}</script>
<script>{{ script|safe }}</script>
</body></html>
"""
