"""`trainwell doctor --memory` / `--profile` on hand-written scripts, the `oom` finding
naming the holders of the largest tensors, and the runner's page (docs/doctor-runner.md)
run as written."""

from __future__ import annotations

import csv
import json
import re
import shlex
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO
from trainwell.cli import main
from trainwell.doctor import memory_series
from trainwell.doctor.memory_series import MemorySeries

CORPUS = Path(__file__).resolve().parents[2] / "doctor_corpus"
PAGE = REPO / "docs" / "doctor-runner.md"

GROWING = """
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Linear(16, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
cache = []
for step in range({steps}):
    opt.zero_grad()
    nn.functional.cross_entropy(model(torch.randn(8, 16)), torch.randint(0, 2, (8,))).backward()
    opt.step()
    cache.append(torch.zeros({floats}))
"""


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
@pytest.mark.parametrize("steps,floats", [(12, 2**18), (25, 2**16)])
def test_memory_series_rows_plot_and_the_cpu_note(tmp_path, capsys, steps, floats):
    script = tmp_path / "train.py"
    script.write_text(GROWING.format(steps=steps, floats=floats))
    out = tmp_path / "files"
    code = main(["doctor", "--memory", "--out", str(out), str(script)])
    assert code == 0
    rows = _rows(out / "memory.csv")
    assert [int(r["step"]) for r in rows] == list(range(1, steps + 1))
    live = [float(r["live_tensor_mb"]) for r in rows if r["live_tensor_mb"]]
    # The kept tensors show up: the last measured step holds about (steps - 1) of them
    # more than the first (4 bytes a float), whatever else is alive.
    grown = (live[-1] - live[0]) * 2**20
    measured = [int(r["step"]) for r in rows if r["live_tensor_mb"]]
    assert grown == pytest.approx((measured[-1] - measured[0]) * floats * 4, rel=0.05)
    assert all(float(r["rss_mb"]) > 0 for r in rows)
    assert (out / "memory.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "CPU run" in (out / "memory_summary.txt").read_text()
    err = capsys.readouterr().err
    assert f"memory: {steps} steps sampled" in err and "CPU run" in err


@pytest.mark.slow
def test_memory_files_go_next_to_json_and_out_alone_is_refused(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text(GROWING.format(steps=3, floats=16))
    report = tmp_path / "report" / "findings.json"
    report.parent.mkdir()
    assert main(["doctor", "--memory", "--json", str(report), str(script)]) == 0
    assert (report.parent / "memory.csv").exists()
    assert json.loads(report.read_text())["memory"]["steps"] == 3
    assert main(["doctor", "--out", str(tmp_path / "x"), str(script)]) == 2
    assert "--out is for the files of --memory and --profile" in capsys.readouterr().err
    (tmp_path / "afile").write_text("")
    assert main(["doctor", "--memory", "--out", str(tmp_path / "afile"), str(script)]) == 2


def test_the_cuda_series_keeps_the_summary_at_the_peak_and_at_an_oom(tmp_path, monkeypatch):
    # No GPU here: the allocator's counters are stood in for, to check what is kept.
    allocated = iter([100, 300, 200, 900, 905] + [0] * 10)
    monkeypatch.setattr(MemorySeries, "_cuda", staticmethod(lambda: True))
    state = {"peak": 0, "now": 0}

    def alloc():
        state["now"] = next(allocated)
        state["peak"] = max(state["peak"], state["now"])
        return state["now"]

    monkeypatch.setattr(torch.cuda, "memory_allocated", alloc)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda: 1024)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda: state["peak"])
    monkeypatch.setattr(torch.cuda, "memory_summary", lambda: f"summary at {state['peak']}")
    series = MemorySeries(tmp_path)
    for step in range(1, 6):
        series.sample(step)
    series.at_oom()
    names = {p.name for p in series.write()}
    assert {"memory.csv", "memory.png", "memory_summary.txt", "memory_oom.txt"} <= names
    # 905 is not a twentieth above 900: the summary at 900 is the peak's.
    assert "summary at 900" in (tmp_path / "memory_summary.txt").read_text()
    rows = _rows(tmp_path / "memory.csv")
    assert [r["cuda_peak_mb"] for r in rows][-1] == str(round(905 / 2**20, 3))


def test_live_tensor_bytes_count_a_shared_storage_once():
    base = torch.zeros(2**20, dtype=torch.uint8)
    before = memory_series.live_tensor_bytes()
    views = [base[:10], base.view(1024, 1024)]  # same storage: no more bytes
    assert memory_series.live_tensor_bytes() == before
    extra = torch.zeros(2**19, dtype=torch.uint8)
    assert memory_series.live_tensor_bytes() - before == 2**19
    del views, extra


@pytest.mark.slow
def test_profile_prints_the_operator_table_and_writes_the_trace(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text(GROWING.format(steps=10, floats=16))
    assert main(["doctor", "--profile", "--out", str(tmp_path / "o"), str(script)]) == 0
    err = capsys.readouterr().err
    assert "profiled 5 steps after 3 warm-up on cpu" in err
    assert re.search(r"aten::\w+ .* ms .*calls", err)
    trace = json.loads((tmp_path / "o" / "profile" / "trace.json").read_text())
    assert any(e.get("name", "").startswith("aten::") for e in trace["traceEvents"])
    ops = _rows(tmp_path / "o" / "profile" / "profile_ops.csv")
    assert ops and all(int(op["calls"]) > 0 for op in ops)
    script.write_text(GROWING.format(steps=2, floats=16))  # ends before the warm-up does
    assert main(["doctor", "--profile", "--out", str(tmp_path / "p"), str(script)]) == 0
    assert "nothing recorded: training ended after 2 steps" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize(
    "name,holder,kind",
    [("crash_oom_outputs_kept_in_list", "all_features", "a list"),
     ("crash_oom_cache_dict_on_object", "self.cache", "a dict")],
)  # fmt: skip
def test_an_oom_names_the_container_that_holds_the_largest_tensors(
    tmp_path, capsys, name, holder, kind
):
    out = tmp_path / "f.json"
    assert main(["doctor", "--json", str(out), str(CORPUS / f"{name}.py")]) == 1
    (finding,) = json.loads(out.read_text())["findings"]
    top = finding["evidence"]["holders"][0]
    assert (top["holder"], top["kind"]) == (holder, kind)
    assert top["tensors"] > 10
    assert f"held by `{holder}` ({kind}" in capsys.readouterr().err  # the text report


def _blocks(text: str) -> list[tuple[str, str]]:
    return re.findall(r"```(\w*)\n(.*?)```", text, flags=re.S)


@pytest.mark.slow
def test_the_runner_page_example_runs_as_written(tmp_path, cli):
    blocks = _blocks(PAGE.read_text())
    (source,) = [
        body for lang, body in blocks if lang == "python" and body.startswith("# train.py")
    ]
    (tmp_path / "train.py").write_text(source)
    (command,) = [body for lang, body in blocks if lang == "bash"]
    args = shlex.split(command.strip())
    assert args[:2] == ["trainwell", "doctor"]
    code, _, err = cli(*args[1:])  # in-process, from tmp_path: the same main
    assert code == 0, err[-2000:]
    files = tmp_path / "doctor-files"
    for name in ("memory.csv", "memory.png", "memory_summary.txt", "profile/trace.json",
                 "profile/profile_ops.csv"):  # fmt: skip
        assert (files / name).is_file(), name
    rows = _rows(files / "memory.csv")
    assert len(rows) == 40
    assert json.loads((tmp_path / "findings.json").read_text())["memory"]["steps"] == 40
