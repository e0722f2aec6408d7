"""The report's charts and stop reasons as issue 26 §6 wants them: the step anatomy's
shares stacked alone (step time in ms on its own chart), val and test points told apart in
a comparison, and a failed run's stop reason shown instead of '?'."""

from __future__ import annotations

import json
from pathlib import Path

from trainwell.report import load_run
from trainwell.report.charts import build_charts
from trainwell.report.context import run_context

ANATOMY = ["data", "compute", "optim", "other"]


def fake_run(path: Path, status: str, rows: list[str], **summary) -> Path:
    path.mkdir(parents=True)
    (path / "summary.json").write_text(json.dumps({"status": status, **summary}))
    (path / "config.yaml").write_text("data:\n  name: synthetic\n")
    (path / "metrics.csv").write_text("\n".join(["step,epoch,split,name,value", *rows]) + "\n")
    return path


def anatomy_rows() -> list[str]:
    rows = []
    for step in (10, 20, 30):
        rows += [f"{step},0,train,loss,{1 / step}", f"{step},0,train,time/step_ms,{4.5 + step}"]
        rows += [f"{step},0,train,time/{p},0.25" for p in ANATOMY]
    return rows


def charts_by_title(runs):
    return {c.title: c for c in build_charts(runs)}


def test_the_shares_stack_alone_and_the_step_time_has_its_own_chart(tmp_path):
    run = load_run(fake_run(tmp_path / "r", "completed", anatomy_rows()))
    charts = charts_by_title([run])
    shares = charts["step anatomy"].figure
    names = [t["name"] for t in shares["data"]]
    assert sorted(names) == sorted(f"train/time/{p}" for p in ANATOMY)
    assert all(t.get("stackgroup") == "anatomy" for t in shares["data"])
    # Stacked, the shares sum to 1 at every step: nothing in ms rides on the same axis.
    for i in range(3):
        assert sum(t["y"][i] for t in shares["data"]) == 1.0
    assert shares["layout"]["yaxis"]["title"]["text"] == "fraction of step time"
    step = charts["step time"].figure
    assert [t["name"] for t in step["data"]] == ["train/time/step_ms"]
    assert step["data"][0]["y"] == [14.5, 24.5, 34.5] and "stackgroup" not in step["data"][0]
    assert step["layout"]["yaxis"]["title"]["text"] == "ms per optimizer step"


def test_in_a_comparison_a_runs_val_and_test_points_differ_in_shape(tmp_path):
    rows = ["10,0,val,accuracy,0.8", "20,0,val,accuracy,0.9", "20,0,test,accuracy,0.88"]
    runs = [load_run(fake_run(tmp_path / n, "completed", rows)) for n in ("a", "b")]
    traces = charts_by_title(runs)["accuracy"].figure["data"]
    by_name = {t["name"]: t for t in traces}
    a_val, a_test = by_name["a · val/accuracy"], by_name["a · test/accuracy"]
    assert a_val["marker"]["color"] == a_test["marker"]["color"]  # one colour per run
    assert a_val["marker"]["symbol"] != a_test["marker"]["symbol"]
    assert a_val["line"]["dash"] != a_test["line"]["dash"]


def test_a_failed_runs_stop_reason_is_its_error(tmp_path):
    failed = load_run(fake_run(tmp_path / "f", "failed", ["1,0,train,loss,1.0"],
                               error="RuntimeError: mat1 and mat2 shapes cannot be multiplied"))
    assert run_context(failed)["stop_reason"] == (
        "failed: RuntimeError: mat1 and mat2 shapes cannot be multiplied"
    )
    bare = load_run(fake_run(tmp_path / "g", "failed", ["1,0,train,loss,1.0"]))
    assert run_context(bare)["stop_reason"] == "failed (no error was recorded)"
    # A recorded stop reason is kept as it is.
    done = load_run(fake_run(tmp_path / "h", "failed", [], stop_reason="diverged", error="x"))
    assert run_context(done)["stop_reason"] == "diverged"
