"""The report without a browser: bad input, the fallback page, offline HTML, speed, torch-free
checkpoint reading, the memory verdict, and the package's docstring examples."""

from __future__ import annotations

import ast
import cProfile
import doctest
import importlib
import json
import os
import pickle
import pkgutil
import pstats
import re
import zipfile
from pathlib import Path

import pytest
import torch

import trainwell.report
from tests.conftest import REPO, SYNTHETIC
from trainwell.report import load_run, render, write_report, write_run_report
from trainwell.report.charts import build_charts
from trainwell.report.checkpoints import list_checkpoints, read_state
from trainwell.report.context import figures_json

MODULES = sorted(m.name for m in pkgutil.iter_modules(trainwell.report.__path__))
# Attributes whose URL an offline page must not hold: scripts, styles, images, fonts.
REMOTE = re.compile(r"""(src|href)\s*=\s*["']?\s*(https?:)?//|url\(\s*["']?(https?:)?//|@import""")


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(f"trainwell.report.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} failed"


def test_package_docstring_examples():
    assert doctest.testmod(trainwell.report, optionflags=doctest.ELLIPSIS).failed == 0


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> Path:
    from trainwell.cli import main

    run = tmp_path_factory.mktemp("real") / "run"
    assert main(["train", *SYNTHETIC, "train.epochs=1", "checkpoint.every_steps=5",
                 f"run.dir={run}"]) == 0  # fmt: skip
    return run


def fake_run(path: Path, status: str = "completed", metrics: str = "", **summary) -> Path:
    path.mkdir(parents=True)
    (path / "summary.json").write_text(json.dumps({"status": status, **summary}))
    (path / "config.yaml").write_text("data:\n  name: synthetic\noptim:\n  lr: 0.1\n")
    (path / "metrics.csv").write_text("step,epoch,split,name,value\n" + metrics)
    return path


def test_a_folder_that_is_not_a_run_is_one_line(cli, tmp_path):
    (tmp_path / "empty").mkdir()
    for path in ("empty", "missing"):
        code, out, err = cli("report", path)
        assert code == 2 and out == ""
        assert err.count("\n") == 1 and "Traceback" not in err
    assert "empty is not a run directory" in cli("report", "empty")[2]
    assert "missing does not exist" in cli("report", "missing")[2]


@pytest.mark.slow
def test_write_run_report_is_fast_atomic_and_never_raises(real_run, tmp_path, capsys):
    render.plotly_js()  # read once per process, as at the end of a second run
    # Counted work, not wall time (a loaded machine slows both sides): about 140k Python
    # calls for this run today, which is a fraction of a second; a report that loaded its
    # checkpoints with torch or built plotly's figure objects would be several times that.
    profile = cProfile.Profile()
    path = profile.runcall(write_run_report, real_run)
    assert pstats.Stats(profile).total_calls < 500_000
    assert path == real_run / "report.html" and path.read_text().rstrip().endswith("</html>")
    assert not list(real_run.glob(".*.tmp"))
    # A folder that is not a run, and a target that cannot be written: None and one line.
    assert write_run_report(tmp_path) is None
    (real_run / "report.html").unlink()
    (real_run / "report.html").mkdir()
    try:
        assert write_run_report(real_run) is None
    finally:
        (real_run / "report.html").rmdir()
    err = capsys.readouterr().err
    assert err.count("trainwell: warning: no report.html") == 2 and "Traceback" not in err


@pytest.mark.slow
def test_the_page_asks_nothing_of_the_network(real_run, tmp_path):
    page = write_report([real_run], tmp_path / "r.html").read_text()
    bundle = render.plotly_js()
    assert bundle and bundle in page  # plotly.js is inlined whole
    outside = page.replace(bundle, "")
    assert not REMOTE.search(outside), REMOTE.search(outside)
    assert "<link" not in outside and outside.count("<script") == 3


@pytest.mark.slow
def test_checkpoints_are_read_without_torch_with_step_and_metric(real_run):
    notes: list[str] = []
    found = {c.name: c for c in list_checkpoints(real_run / "checkpoints", notes)}
    assert notes == []
    state = torch.load(real_run / "checkpoints" / "last.pt", weights_only=True)
    assert found["last.pt"].step == state["step"] == 14
    assert found["last.pt"].metrics == pytest.approx(state["metrics"])
    assert found["step-10.pt"].step == 10


def test_a_damaged_or_malicious_checkpoint_is_only_a_note(tmp_path):
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    (folder / "cut.pt").write_bytes(b"PK\x03\x04 cut by a crash")

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'pwned'}",))

    with zipfile.ZipFile(folder / "step-3.pt", "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps({"step": 3, "x": Evil()}))
    notes: list[str] = []
    found = {c.name: c for c in list_checkpoints(folder, notes)}
    assert found["step-3.pt"].step == 3 and not (tmp_path / "pwned").exists()
    assert found["cut.pt"].step is None and notes == [
        "checkpoints/cut.pt: its step and metrics could not be read"
    ]
    assert read_state(folder / "cut.pt") is None


def test_a_metrics_csv_cut_mid_line_and_nan_values(tmp_path):
    rows = "1,0,train,loss,2.0\n2,0,train,loss,nan\n3,0,train,loss,inf\n4,0,tr"
    run = load_run(fake_run(tmp_path / "r", metrics=rows))
    assert run.series["train/loss"].steps == [1, 2, 3]
    assert run.notes == ["metrics.csv: line 5 is cut or malformed (skipped): 4,0,tr"]
    assert run.partial
    figures = json.loads(figures_json(build_charts([run])))  # valid JSON: no NaN
    traces = figures["chart-0"]["data"]
    assert traces[0]["y"] == [2.0, None, None]
    assert traces[1]["name"] == "train/loss: NaN/Inf" and traces[1]["x"] == [2, 3]


def test_the_memory_timeline_marks_the_doctors_verdict(tmp_path):
    rows = "".join(f"{s},0,train,mem/rss_mb,{100 + s}\n{s},0,train,mem/tensor_mb,{s}\n"
                   for s in (10, 20, 30))  # fmt: skip
    path = fake_run(tmp_path / "r", metrics=rows)
    finding = {"code": "tensor-accumulation", "severity": "warning", "file": "t.py", "line": 5,
               "message": "m", "fix": "f", "evidence": {"step": 20}}  # fmt: skip
    (path / "doctor.json").write_text(json.dumps({"findings": [finding]}))
    (memory,) = build_charts([load_run(path)])
    layout = memory.figure["layout"]
    assert memory.title == "memory"
    assert layout["annotations"][0]["text"] == "doctor: leak (tensor-accumulation at t.py:5)"
    assert {"type": "line", "x0": 20} .items() <= layout["shapes"][1].items()
    assert [t.get("yaxis", "y") for t in memory.figure["data"]] == ["y", "y2"]


@pytest.mark.slow
def test_without_plotly_or_jinja2_a_plain_page(real_run, tmp_path, monkeypatch):
    monkeypatch.setattr(render, "plotly_js", lambda: None)
    page = write_report([real_run], tmp_path / "plain.html").read_text()
    assert "trainwell[report]" in page and "Plotly" not in page and "<script" not in page
    summary = json.loads((real_run / "summary.json").read_text())
    assert f"{summary['final']['val/loss']:.4g}" in page and "data:image/png;base64," in page
    monkeypatch.undo()
    monkeypatch.setattr(render, "_page", lambda: None)
    assert "trainwell[report]" in write_report([real_run], tmp_path / "p2.html").read_text()


@pytest.mark.slow
def test_runs_of_different_tasks_compared_are_marked(cli, tmp_path, real_run):
    other = fake_run(tmp_path / "other", metrics="1,0,train,mse,2.0\n")
    (other / "config.yaml").write_text("data:\n  name: tests.tasks_code:make_regression\n")
    code, out, err = cli("report", str(real_run), "other", "--out", "both.html")
    assert code == 0, err
    assert "note: these runs train different tasks (data.name:" in out
    assert out.strip().endswith("both.html (partial)")
    page = (tmp_path / "both.html").read_text()
    assert "Partial report." in page and "these runs train different tasks" in page


def test_report_modules_import_neither_torch_nor_the_engine():
    files = [*(REPO / "trainwell" / "report").glob("*.py"),
             REPO / "trainwell" / "commands" / "report.py"]  # fmt: skip
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert not name.startswith(("torch", "trainwell.engine", "trainwell.doctor",
                                            "matplotlib")), (path.name, name)  # fmt: skip
