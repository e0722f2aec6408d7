"""Reports of real runs (completed, failed, interrupted, resumed, compared) and of a run
still going with a metrics.csv cut mid-line, opened in headless Chromium.

Each page must draw marks in every chart, log no console error, make no request beyond
its own file (Chromium runs behind a proxy that refuses everything), and show the
findings and the metric values. Screenshots go to ``$TW_REPORT_SHOTS`` when it is set,
for a person to look at.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
from pathlib import Path

import pytest
import torch.nn.functional as F

from tests.conftest import SYNTHETIC, read_summary
from tests.e2e.test_report_chromium import CHROMIUM, Browser, Page
from trainwell.cli import main
from trainwell.report import write_report, write_run_report
from trainwell.report.compare import fmt

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium binary (apt-get install chromium; .ci/run does)"
)
HERE = "tests.e2e.test_report_browser"
_HELD: list = []


def nan_step(model, batch):
    """A step whose loss is NaN from the start: the run diverges and fails."""
    x, y = batch
    return F.cross_entropy(model(x), y) * float("nan")


class SigintAt:
    """Sends this process SIGINT at a step, as a user's Ctrl-C would."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, ctx) -> None:
        if ctx.step == self.step:
            os.kill(os.getpid(), signal.SIGINT)


LEAK = {
    "code": "graph-retained",
    "severity": "error",
    "file": "train.py",
    "line": 42,
    "related": [{"file": "train.py", "line": 37, "what": "created here"}],
    "message": "the loss of every step is kept in `losses` with its autograd graph",
    "fix": "append loss.item() (a float) or loss.detach()",
    "evidence": {"step": 6},
}
FRAGMENTATION = {
    "code": "allocator-fragmentation",
    "severity": "warning",
    "file": "loop.py",
    "line": 9,
    "message": "reserved memory grows while allocated memory stays flat",
    "fix": "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
}


def train(*args: str) -> int:
    return main(["train", *SYNTHETIC, "train.log_every=2", *args])


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("runs")
    made = {name: root / name for name in ("completed", "failed", "interrupted", "resumed")}
    assert train("train.epochs=2", "optim.lr=0.01", f"run.dir={made['completed']}") == 0
    assert train("train.epochs=1", f"train.step={HERE}:nan_step",
                 f"run.dir={made['failed']}") == 1  # fmt: skip
    # Beside what the doctor found, a leak as it reports one: the page must show the
    # finding and mark the verdict on the memory timeline.
    doctor = json.loads((made["failed"] / "doctor.json").read_text())
    doctor["findings"].append(LEAK)
    (made["failed"] / "doctor.json").write_text(json.dumps(doctor))
    stop = f"callbacks=[{{name: {HERE}:SigintAt, kwargs: {{step: 17}}}}]"
    assert train("train.epochs=2", stop, f"run.dir={made['interrupted']}") == 130
    shutil.copytree(made["interrupted"], made["resumed"])
    resumed = made["resumed"]
    assert main(["train", "--config", str(resumed / "config.yaml"), f"run.dir={resumed}",
                 "--resume", "auto", "callbacks=[]"]) == 0  # fmt: skip
    made["running"] = running_run(root / "running")
    return made


def running_run(path: Path) -> Path:
    """A run on a GPU still going (its process alive: this one), cut mid-line by a crash."""
    path.mkdir()
    (path / ".lock").write_text(str(os.getpid()))
    # Held as a live run holds it (report asks the lock, not the pid written in it); the
    # descriptor stays open for the module's tests.
    _HELD.append(open(path / ".lock"))  # noqa: SIM115
    fcntl.flock(_HELD[-1], fcntl.LOCK_EX | fcntl.LOCK_NB)
    (path / "summary.json").write_text(json.dumps({"status": "running", "total_steps": 100}))
    (path / "config.yaml").write_text("data:\n  name: synthetic\nmodel:\n  name: mlp\n")
    rows = ["step,epoch,split,name,value"]
    for step in range(10, 60, 10):
        rows += [f"{step},0,train,loss,{2.0 / step}",
                 f"{step},0,train,mem/cuda_allocated_mb,{1000}",
                 f"{step},0,train,mem/cuda_reserved_mb,{1200 + 40 * step}",
                 f"{step},0,train,mem/cuda_peak_mb,{1100}"]  # fmt: skip
    (path / "metrics.csv").write_text("\n".join(rows) + "\n60,0,train,lo")
    (path / "doctor.json").write_text(json.dumps({"findings": [FRAGMENTATION]}))
    return path


@pytest.fixture(scope="module")
def browser():
    with Browser() as b:
        yield b


def open_report(browser: Browser, html: Path, tmp_path: Path) -> Page:
    shot = tmp_path / f"{html.parent.name}-{html.stem}.png"
    page = browser.open(html, screenshot=shot)
    if os.environ.get("TW_REPORT_SHOTS"):
        Path(os.environ["TW_REPORT_SHOTS"]).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(os.environ["TW_REPORT_SHOTS"]) / shot.name)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    assert page.console_errors == [], page.console_errors
    assert page.requests == [html.resolve().as_uri()], page.requests
    charts = page.info["charts"]
    assert charts and page.info["drawn"] == str(len(charts)), page.info
    for chart in charts:
        assert chart["lines"] + chart["points"] + chart["fills"] > 0, chart
    assert page.info["chart_errors"] == ""
    return page


def final_text(run: Path, metric: str) -> str:
    return fmt(read_summary(run)["final"][metric])


@pytest.mark.slow
def test_completed_run(runs, browser, tmp_path):
    html = write_run_report(runs["completed"])
    page = open_report(browser, html, tmp_path)
    text = page.info["all_text"]
    for expected in ("completed", "epochs", final_text(runs["completed"], "val/accuracy"),
                     final_text(runs["completed"], "val/loss"), "best.pt", "last.pt",
                     "found nothing", "memory", "throughput", "python.version"):  # fmt: skip
        assert expected in text, expected
    titles = [c["id"] for c in page.info["charts"]]
    assert len(titles) >= 5  # loss, accuracy, lr, throughput, memory
    assert "Partial report" not in text


@pytest.mark.slow
def test_failed_run_shows_the_error_the_findings_and_the_leak_on_the_timeline(
    runs, browser, tmp_path
):
    html = write_run_report(runs["failed"])
    page = open_report(browser, html, tmp_path)
    text = page.info["all_text"]
    for expected in ("failed", "diverged", "the training loss became nan", "train.py:42",
                     LEAK["message"], LEAK["fix"], "train.py:37 (created here)",
                     "doctor: leak (graph-retained at train.py:42"):  # fmt: skip
        assert expected in text, expected
    for finding in json.loads((runs["failed"] / "doctor.json").read_text())["findings"]:
        assert finding["message"] in text and finding["fix"] in text
    # The verdict is marked on the memory chart itself (an SVG annotation), not only above.
    assert text.count("doctor: leak") >= 2


@pytest.mark.slow
def test_interrupted_run(runs, browser, tmp_path):
    html = write_run_report(runs["interrupted"])
    page = open_report(browser, html, tmp_path)
    text = page.info["all_text"]
    assert "interrupted" in text and "17 of 28" in text
    assert read_summary(runs["interrupted"])["steps"] == 17


@pytest.mark.slow
def test_resumed_run(runs, browser, tmp_path):
    summary = read_summary(runs["resumed"])
    assert summary["resumed_from"] and summary["status"] == "completed"
    page = open_report(browser, write_run_report(runs["resumed"]), tmp_path)
    text = page.info["all_text"]
    assert "resumed from" in text and "28 of 28" in text
    assert final_text(runs["resumed"], "val/accuracy") in text


@pytest.mark.slow
def test_two_runs_compared(runs, browser, tmp_path):
    html = write_report([runs["completed"], runs["resumed"]], tmp_path / "compare.html")
    page = open_report(browser, html, tmp_path)
    text = page.info["all_text"]
    assert "Runs compared" in text and "optim.lr" in text
    assert final_text(runs["completed"], "val/accuracy") in text
    assert final_text(runs["resumed"], "val/accuracy") in text
    loss = page.info["charts"][0]
    assert loss["lines"] >= 4  # train and val loss of each run, overlaid
    assert "different tasks" not in text


@pytest.mark.slow
def test_running_run_cut_mid_line_is_a_marked_partial_report(runs, browser, tmp_path):
    html = write_report([runs["running"]], tmp_path / "running.html")
    page = open_report(browser, html, tmp_path)
    text = page.info["all_text"]
    for expected in ("Partial report", "still running", "line 22 is cut",
                     "doctor: fragmentation (allocator-fragmentation at loop.py:9)",
                     "cuda_reserved_mb", "latest metrics"):  # fmt: skip
        assert expected in text, expected


def test_the_harness_sees_console_errors_and_requests(browser, tmp_path):
    """The checks above can fail: a page with an error and a remote image is caught."""
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body data-charts-drawn='1'><img src='http://example.com/x.png'>"
                   "<script>console.error('boom')</script></body></html>")  # fmt: skip
    page = browser.open(bad)
    assert any("boom" in e for e in page.console_errors)
    assert "http://example.com/x.png" in page.requests


def test_a_crashed_runs_stop_reason_and_the_step_time_chart_in_the_browser(browser, tmp_path):
    run = tmp_path / "crashed"
    run.mkdir()
    error = "RuntimeError: mat1 and mat2 shapes cannot be multiplied (32x8 and 9x32)"
    (run / "summary.json").write_text(json.dumps({"status": "failed", "error": error}))
    (run / "config.yaml").write_text("data:\n  name: synthetic\n")
    rows = ["step,epoch,split,name,value"]
    for step in (2, 4, 6):
        rows += [f"{step},0,train,loss,{1 / step}", f"{step},0,train,time/step_ms,{3 + step}"]
        rows += [f"{step},0,train,time/{p},0.25" for p in ("data", "compute", "optim", "other")]
    (run / "metrics.csv").write_text("\n".join(rows) + "\n")
    page = open_report(browser, write_run_report(run), tmp_path)
    text = page.info["all_text"]
    assert f"failed: {error}" in text and "stop reason?" not in text.replace(" ", "")
    assert "step time" in text and "step anatomy" in text
    assert len(page.info["charts"]) == 3  # loss, the shares (stacked), the step time
    assert page.info["charts"][1]["fills"] >= 4  # the four shares, filled to the next
