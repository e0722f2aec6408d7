"""Profiling: StepProfiler's window and files, and ``trainwell profile`` on small runs."""

from __future__ import annotations

import csv
import json

import pytest
import torch
from torch import nn

from tests.conftest import SYNTHETIC
from trainwell.engine.tools.profiling import StepProfiler
from trainwell.errors import UserError

CPU = torch.device("cpu")


def profiler_on() -> bool:
    return torch.autograd._profiler_enabled()


@pytest.fixture(autouse=True)
def one_thread():
    """One intra-op thread: on a busy machine, waiting for a second one can make a tiny
    softmax slower than a matmul, and the heaviest operators would be noise."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
    assert not profiler_on(), "a test left the profiler running"


def train(prof: StepProfiler | None, steps: int, on_step=None) -> None:
    """A few SGD steps of a small MLP whose matmuls dominate the time."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                        nn.Linear(256, 8))  # fmt: skip
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x, y = torch.randn(256, 64), torch.randn(256, 8)
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        nn.functional.mse_loss(net(x), y).backward()
        opt.step()
        if prof is not None:
            prof.step()
        if on_step is not None:
            on_step()


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    """One profiled run (3 warm-up, 2 recorded, 2 after), with the profiler's state after
    each step."""
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("profile") / "out"
    prof = StepProfiler(out, warmup=3, active=2, device=CPU)
    states = [profiler_on()]
    train(prof, 7, on_step=lambda: states.append(profiler_on()))
    prof.close()
    return prof, out, states


@pytest.mark.slow
def test_the_profiler_runs_only_inside_its_window(profiled):
    prof, _, states = profiled
    # Before step 1, after steps 1..7: on from the end of the 3rd step to the end of the 5th.
    assert states == [False, False, False, True, True, False, False, False]
    assert prof.done and prof.recorded == 2 and prof.seen == 7


@pytest.mark.slow
def test_trace_is_a_chrome_trace_with_aten_ops(profiled):
    _, out, _ = profiled
    trace = json.loads((out / "trace.json").read_text())
    names = {event.get("name", "") for event in trace["traceEvents"]}
    assert "aten::addmm" in names
    # One range per recorded step, numbered as the optimizer steps are.
    assert {"ProfilerStep#4", "ProfilerStep#5"} <= names and "ProfilerStep#6" not in names
    assert not list(out.glob(".*.tmp"))


@pytest.mark.slow
def test_ops_table_is_sorted_by_self_time_with_memory(profiled):
    _, out, _ = profiled
    with open(out / "profile_ops.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["name", "module", "calls", "self_cpu_ms", "cpu_total_ms",
                             "cpu_memory_mb", "memory_rank"]  # fmt: skip
    times = [float(r["self_cpu_ms"]) for r in rows]
    assert times == sorted(times, reverse=True) and times[0] > 0
    # The first Linear's output: 256 x 256 float32 per call, two calls in the window.
    addmm = [r for r in rows if r["name"] == "aten::addmm" and r["module"].endswith("Linear_1")]
    assert len(addmm) == 1 and int(addmm[0]["calls"]) == 2
    assert float(addmm[0]["cpu_memory_mb"]) == pytest.approx(2 * 256 * 256 * 4 / 2**20)
    ranks = sorted(int(r["memory_rank"]) for r in rows)
    assert ranks == list(range(1, len(rows) + 1))
    top = min(rows, key=lambda r: int(r["memory_rank"]))
    assert float(top["cpu_memory_mb"]) == max(float(r["cpu_memory_mb"]) for r in rows)


@pytest.mark.slow
def test_ops_are_tied_to_their_module_forward_backward_and_optimizer(profiled):
    prof, _, _ = profiled
    where = {(op.name, op.module) for op in prof.ops}
    assert ("aten::addmm", "Sequential_0/Linear_0") in where
    assert ("aten::mm", "Sequential_0/Linear_2 (backward)") in where
    assert ("aten::threshold_backward", "Sequential_0/ReLU_0 (backward)") in where
    assert any(module.startswith("Optimizer.step#SGD") for _, module in where)


@pytest.mark.slow
def test_summary_names_the_heaviest_ops_and_their_linear_module(profiled):
    prof, out, _ = profiled
    lines = prof.summary_lines()
    assert lines[0].startswith("profiled 2 steps after 3 warm-up on cpu")
    ops = lines[1:6]
    assert len(ops) == 5
    assert any(
        ("aten::addmm" in line or "aten::mm" in line or "aten::linear" in line)
        and "Linear_" in line
        for line in ops
    ), lines
    assert any(str(out / "trace.json") in line and "ui.perfetto.dev" in line for line in lines)


def test_close_before_the_window_writes_nothing_with_a_note(tmp_path):
    prof = StepProfiler(tmp_path / "out", warmup=3, active=2, device=CPU)
    train(prof, 2)
    prof.close()
    prof.close()  # twice is fine
    assert not (tmp_path / "out").exists()
    assert len(prof.summary_lines()) == 1 and "nothing recorded" in prof.summary_lines()[0]
    train(prof, 3)  # steps after close() start nothing
    assert not profiler_on() and not (tmp_path / "out").exists()


def test_close_inside_the_window_writes_what_was_recorded(tmp_path):
    prof = StepProfiler(tmp_path / "out", warmup=1, active=5, device=CPU)
    train(prof, 3)
    assert profiler_on()
    prof.close()
    assert not profiler_on()
    assert (tmp_path / "out" / "trace.json").is_file()
    assert (tmp_path / "out" / "profile_ops.csv").is_file()
    assert prof.recorded == 2
    assert "ended inside the 5-step window" in prof.summary_lines()[0]
    prof.close()
    train(prof, 6)  # the window is spent: no second one opens
    assert not profiler_on()


def test_warmup_zero_records_from_the_first_step(tmp_path):
    prof = StepProfiler(tmp_path, warmup=0, active=1, device=CPU)
    assert profiler_on()
    train(prof, 2)
    assert not profiler_on() and prof.recorded == 1 and (tmp_path / "trace.json").is_file()


def test_a_crash_inside_the_window_stops_the_profiler_and_writes_nothing(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="boom"), StepProfiler(out, 1, 5, CPU) as prof:
        train(prof, 2)
        raise RuntimeError("boom")
    assert not profiler_on() and not out.exists()


@pytest.mark.parametrize("warmup, active", [(-1, 5), (3, 0)])
def test_bad_window_is_a_user_error(tmp_path, warmup, active):
    with pytest.raises(UserError, match="profile:"):
        StepProfiler(tmp_path, warmup=warmup, active=active, device=CPU)


@pytest.mark.slow
def test_cli_profiles_the_configs_run_into_a_new_folder(cli, tmp_path):
    code, out, err = cli("profile", *SYNTHETIC, "--steps", "2", "--warmup", "1")
    assert code == 0, err
    (folder,) = (tmp_path / "runs").iterdir()
    assert folder.name.endswith("-profile-synthetic-mlp")
    assert {p.name for p in folder.iterdir()} == {"trace.json", "profile_ops.csv"}
    assert "traceEvents" in json.loads((folder / "trace.json").read_text())
    assert "five heaviest operators" in out and "aten::" in out
    trace = folder.relative_to(tmp_path) / "trace.json"
    assert f"trace: {trace}" in out
    assert "https://ui.perfetto.dev or chrome://tracing" in out
    assert not profiler_on()


@pytest.mark.slow
def test_cli_out_and_run_dir_untouched(cli, tmp_path):
    code, out, err = cli("profile", "--out", "prof", *SYNTHETIC, "run.dir=myrun",
                         "--steps", "1", "--warmup", "0")  # fmt: skip
    assert code == 0, err
    assert (tmp_path / "prof" / "trace.json").is_file()
    assert not (tmp_path / "myrun").exists() and not (tmp_path / "runs").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, words",
    [
        (["--steps", "0"], "--steps must be at least 1"),
        (["--warmup", "-2"], "--warmup must be 0 or more"),
        (["optim.lr=fast"], "optim.lr"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(cli, tmp_path, args, words):
    code, out, err = cli("profile", *SYNTHETIC, *args)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and words in err, err
    assert not (tmp_path / "runs").exists()


def test_python_events_are_told_apart_without_is_python_function():
    # torch 2.11 (a GPU machine's) has no FunctionEvent.is_python_function: the names
    # tell a module's or a Python function's event from an operator's.
    from types import SimpleNamespace

    from trainwell.engine.tools.profile_ops import is_python

    assert is_python(SimpleNamespace(name="nn.Module: Linear_0"))
    assert is_python(SimpleNamespace(name="train.py(12): step"))
    assert not is_python(SimpleNamespace(name="aten::addmm"))
    assert is_python(SimpleNamespace(name="aten::addmm", is_python_function=True))
    assert not is_python(SimpleNamespace(name="nn.Module: X", is_python_function=False))
