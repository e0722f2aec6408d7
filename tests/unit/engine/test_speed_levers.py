"""Step anatomy (time/* rows), train.compile (with its fallback) and activation checkpointing."""

from __future__ import annotations

import csv
import json

import pytest
import torch
from rich.console import Console
from torch import nn
from torch.utils.data import TensorDataset

import trainwell
from tests.conftest import SYNTHETIC, model_csv, read_summary, run_subprocess
from trainwell.config import load_config
from trainwell.engine.checkpointing.checkpoint import load_checkpoint
from trainwell.engine.distributed import compiling
from trainwell.engine.step.anatomy import StepClock
from trainwell.errors import UserError

QUIET = Console(quiet=True)


def fit(tmp_path, *overrides, name="run", **kw):
    cfg = load_config(overrides=[*SYNTHETIC, "train.epochs=2", "train.log_every=4",
                                 f"run.dir={tmp_path / name}", *overrides])  # fmt: skip
    return trainwell.fit(cfg, console=kw.pop("console", QUIET), **kw)


def rows(run_dir, prefix="time/"):
    with open(run_dir / "metrics.csv") as f:
        return [r for r in csv.DictReader(f) if r["name"].startswith(prefix)]


@pytest.mark.slow
def test_every_log_point_says_where_the_step_time_went(tmp_path):
    result = fit(tmp_path)
    got = rows(result.run_dir)
    steps = {int(r["step"]) for r in got}
    assert steps == {4, 8, 12, 16, 20, 24, 28}  # 14 steps an epoch, every log point
    for step in steps:
        at = {r["name"]: float(r["value"]) for r in got if int(r["step"]) == step}
        # A CPU run copies nothing and compiles nothing: no such rows.
        assert set(at) == {"time/data", "time/compute", "time/optim", "time/other",
                           "time/step_ms"}  # fmt: skip
        assert abs(sum(v for k, v in at.items() if k != "time/step_ms") - 1) < 1e-6
        assert at["time/compute"] > 0 and at["time/optim"] > 0 and at["time/step_ms"] > 0
    shares = read_summary(result.run_dir)["time_shares"]
    assert set(shares) <= {"data", "compute", "optim", "other"} and shares["compute"] > 0
    assert result.summary["compile_s"] is None


class SlowData(TensorDataset):
    """Each sample costs 3 ms to load: a starved model. Loads during training are counted."""

    loads = 0

    def __getitem__(self, i):
        import time

        SlowData.loads += 1
        time.sleep(0.003)
        return super().__getitem__(i)


@pytest.mark.slow
def test_a_slow_data_set_shows_as_data_wait(tmp_path):
    data = SlowData(torch.randn(256, 8), torch.randint(0, 4, (256,)))
    SlowData.loads = 0
    result = fit(tmp_path, "data.batch_size=16", "train.precision=fp32", train_data=data)
    summary = read_summary(result.run_dir)
    shares = summary["time_shares"]
    # Counted work, not a share that a loaded machine moves: a sleep lasts at least what it
    # asks, so the data phase holds at least the training batches' sleeps (16 per step;
    # the dry step's and the evaluation's loads are outside the steps' time).
    slept = summary["steps"] * 16 * 0.003
    assert SlowData.loads >= summary["steps"] * 16
    assert shares["data"] * summary["train_time_s"] >= 0.95 * slept, (shares, summary)
    # 16 samples x 3 ms = 48 ms of loading per step against about a millisecond of compute.
    assert shares["data"] == max(shares.values()), shares


def test_step_clock_on_cpu_counts_marks_into_phases():
    clock = StepClock(torch.device("cpu"))
    clock.restart()
    for _ in range(3):
        clock.mark("data")
        sum(range(20000))  # some work in compute
        clock.mark("compute", ends_step=True)
    shares = clock.window()
    assert shares["time/compute"] > shares["time/data"]
    assert clock.window()["time/step_ms"] == 0  # a new, empty window
    assert set(clock.shares()) == {"data", "compute"}


def _eager_backend(gm, example_inputs):
    return gm.forward


def _broken_backend(gm, example_inputs):
    raise RuntimeError("this backend cannot compile anything")


@pytest.fixture
def backend(monkeypatch):
    """Compile through Dynamo with a chosen backend (Inductor's C++ build takes ~20 s here;
    benchmarks/compile.py measures it)."""

    def use(fn):
        monkeypatch.setattr(
            "trainwell.engine.fit.compile_model", lambda net, mode: torch.compile(net, backend=fn)
        )

    return use


@pytest.mark.slow
def test_compile_trains_the_same_model_with_the_same_checkpoint_keys(tmp_path, backend):
    torch._dynamo.reset()
    backend(_eager_backend)
    eager = fit(tmp_path, "train.precision=fp32", name="eager")
    compiled = fit(tmp_path, "train.precision=fp32", "train.compile=true", name="compiled")
    state = load_checkpoint(compiled.run_dir / "checkpoints" / "last.pt")["model"]
    assert list(state) == list(eager.model.state_dict())  # no "_orig_mod." prefixes
    assert all(torch.equal(state[k], v) for k, v in eager.model.state_dict().items())
    assert model_csv(compiled.run_dir / "metrics.csv") == model_csv(eager.run_dir / "metrics.csv")
    assert compiled.summary["compile_s"] > 0
    assert any(r["name"] == "time/compile" for r in rows(compiled.run_dir))


@pytest.mark.slow
def test_a_model_that_does_not_compile_trains_eager_with_one_line(tmp_path, backend):
    torch._dynamo.reset()
    backend(_broken_backend)
    console = Console(record=True, width=200)
    result = fit(tmp_path, "train.compile=true", console=console)
    text = console.export_text()
    warnings = [line for line in text.splitlines() if "did not compile" in line]
    assert len(warnings) == 1 and "this backend cannot compile anything" in warnings[0]
    assert "training eager instead" in warnings[0] and "compiled in" not in text
    assert read_summary(result.run_dir)["status"] == "completed"
    assert read_summary(result.run_dir)["steps"] == 28  # the failed step was taken again


@pytest.mark.slow
def test_a_model_error_under_compile_is_the_models_error(tmp_path, backend):
    torch._dynamo.reset()
    backend(_eager_backend)

    class Broken(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 4)

        def forward(self, x):
            if self.training:
                return self.fc(x[:, :3])  # a shape bug only training runs into
            return self.fc(x)

    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        fit(tmp_path, "train.compile=true", model=Broken())


class Blocks(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Linear(8, 16)
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(16, 16), nn.GELU(), nn.Dropout(0.1))
                                    for _ in range(3))  # fmt: skip
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        x = self.stem(x)
        for layer in self.layers:
            x = x + layer(x)
        return self.head(x)


@pytest.mark.slow
def test_activation_checkpointing_gives_the_same_training(tmp_path):
    plain = fit(tmp_path, "train.precision=fp32", model=Blocks(), name="plain")
    console = Console(record=True, width=200)
    ac = fit(tmp_path, "train.precision=fp32", "model.activation_checkpointing=true",
             model=Blocks(), name="ac", console=console)  # fmt: skip
    assert "activation checkpointing: 3 blocks recompute in backward (layers.0, layers.1, " \
           "layers.2)" in console.export_text()  # fmt: skip
    # Dropout's masks are the same in the recomputation: the same weights, bit for bit.
    assert all(
        torch.equal(v, ac.model.state_dict()[k]) for k, v in plain.model.state_dict().items()
    )
    assert list(ac.model.state_dict()) == list(plain.model.state_dict())


def test_activation_checkpointing_recomputes_in_backward():
    net = Blocks()
    calls = []
    net.layers[0][0].register_forward_hook(lambda *a: calls.append(1))
    assert compiling.checkpoint_activations(net, ["layers.0"]) == ["layers.0"]
    net(torch.randn(4, 8)).sum().backward()
    assert len(calls) == 2  # the forward, and again in backward
    calls.clear()
    with torch.no_grad():
        net(torch.randn(4, 8))
    assert len(calls) == 1  # evaluation keeps nothing, recomputes nothing


@pytest.mark.slow
def test_activation_checkpointing_bad_settings_are_one_line(tmp_path):
    with pytest.raises(UserError, match="no module 'encoder'; its top-level modules: stem, "):
        fit(tmp_path, "model.activation_checkpointing=[encoder]", model=Blocks())
    lone = nn.Linear(8, 4)
    with pytest.raises(UserError, match="no ModuleList or Sequential"):
        fit(tmp_path, "model.activation_checkpointing=true", model=lone, name="lone")
    with pytest.raises(UserError, match="expected true, false or a list of module names"):
        load_config(overrides=["model.activation_checkpointing=3"])
    with pytest.raises(UserError, match="train.compile_mode"):
        load_config(overrides=["train.compile_mode=fastest"])


@pytest.mark.slow
def test_train_profile_writes_a_trace_beside_the_doctor(tmp_path):
    # A real process: the profiler's Python tracer and the doctor's wrapped torch calls
    # once crashed the process together (SIGSEGV); the doctor is on by default.
    run = tmp_path / "run"
    proc = run_subprocess(["train", *SYNTHETIC, "train.epochs=1", "train.profile=true",
                           f"run.dir={run}"], tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "profiled 5 steps after 3 warm-up" in proc.stdout
    trace = json.loads((run / "trace.json").read_text())
    assert any(e.get("name") == "aten::addmm" for e in trace["traceEvents"])
    with open(run / "profile_ops.csv") as f:
        ops = list(csv.DictReader(f))
    assert ops and "cpu_memory_mb" in ops[0]
    assert read_summary(run)["status"] == "completed"


def test_a_compile_failure_on_a_later_micro_batch_counts_each_sample_once():
    from trainwell.engine.state.metrics import MetricSums
    from trainwell.engine.step.precision import Precision
    from trainwell.engine.step.step_fn import LossStep
    from trainwell.engine.step.stepper import Stepper

    class CompileError(RuntimeError):
        pass

    CompileError.__module__ = "torch._dynamo.exc"  # what is_compile_error looks for

    class FailsOnSecondCall(nn.Module):
        def __init__(self, inner: nn.Module) -> None:
            super().__init__()
            self.inner, self.calls = inner, 0

        def forward(self, x):
            self.calls += 1
            if self.calls == 2:
                raise CompileError("graph break on the second micro-batch")
            return self.inner(x)

    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(4, 3, generator=g), torch.tensor([0, 1, 0, 1])) for _ in range(2)]

    def one_step(net, eager):
        sums = MetricSums(torch.device("cpu"))
        cpu = torch.device("cpu")
        stepper = Stepper(net, LossStep(nn.CrossEntropyLoss()),
                          torch.optim.SGD(net.parameters(), lr=0.1),
                          Precision.build("fp32", cpu), 0.0, cpu, eager=eager,
                          on_compile_failure=lambda line: None)  # fmt: skip
        stepper(batches, sums)
        return sums.means(), stepper.samples

    torch.manual_seed(0)
    plain = nn.Linear(3, 2)
    expected = one_step(plain, None)
    torch.manual_seed(0)
    inner = nn.Linear(3, 2)
    assert one_step(FailsOnSecondCall(inner), inner) == expected
    assert torch.equal(inner.weight, plain.weight)


@pytest.mark.slow
def test_the_doctor_does_not_break_the_compiled_graph(tmp_path, backend):
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    graphs = []
    backend(lambda gm, example_inputs: graphs.append(gm) or gm.forward)
    result = fit(tmp_path, "train.precision=fp32", "train.compile=true", "doctor.enabled=true",
                 "model.kwargs.dropout=0.1")  # fmt: skip
    # The doctor's hooks on every module call and on backward are traced through or
    # stay outside the graph: one graph for the whole forward, no break.
    assert dict(counters["graph_break"]) == {}
    assert len(graphs) == 1
    assert read_summary(result.run_dir)["status"] == "completed"
    assert json.loads((result.run_dir / "doctor.json").read_text())["steps"] > 0
