"""A loss's lean steps inlined (``trainwell/engine/step/lean.py``: ``loss_steps``) train as
``Stepper.plain_step`` does, and the loop around them keeps its counters whatever happens.

``tests/unit/engine/test_lean_steps.py`` compares whole lean runs (constant, warmup and
cosine schedules) with the per-step loop; here: which path each run takes, a signal and
a failure inside an inlined step, int32 labels, folds of the running loss inside a run of
steps, the step anatomy's readings, and the errors of a step that cannot train, each
against the per-step path.
"""

from __future__ import annotations

import csv
import os
import signal
from types import SimpleNamespace

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import trainwell
from tests.conftest import read_summary
from trainwell.engine.checkpointing.checkpoint import load_checkpoint
from trainwell.engine.state.metrics import MetricSums
from trainwell.engine.step import lean
from trainwell.engine.step.anatomy import StepClock
from trainwell.engine.step.precision import Precision
from trainwell.engine.step.step_fn import LossStep, StepError
from trainwell.engine.step.stepper import Stepper

# 640 samples in batches of 64: 10 steps an epoch, 23 steps over three epochs.
BASE = ["train.precision=fp32", "doctor.enabled=false", "run.device=cpu", "train.grad_clip=0",
        "data.batch_size=64", "data.num_workers=0", "train.epochs=3", "train.max_steps=23",
        "train.log_every=5", "checkpoint.every_steps=0", "early_stop.patience=0",
        "sched.name=constant"]  # fmt: skip
CPU = torch.device("cpu")


class _PerStep:
    """A callback with on_step_end: the loop takes train_step + after_step every step."""

    def on_step_end(self, ctx) -> None:
        pass


class _Loss:
    """Cross-entropy that, at its ``k``-th call (in step ``k``: fit's checks before training
    call no loss of a ``loss_fn``), sends this process SIGTERM (``action="signal"``) or
    raises (``"raise"``)."""

    def __init__(self, k: int = 0, action: str = "signal") -> None:
        self.k, self.action, self.calls = k, action, 0

    def __call__(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls == self.k and self.action == "signal":
            os.kill(os.getpid(), signal.SIGTERM)  # the handler only sets a flag
        if self.calls == self.k and self.action == "raise":
            raise RuntimeError("the loss failed at this call")
        return nn.functional.cross_entropy(out, y.long())


def _data(labels: torch.dtype = torch.int64) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(640, 8, generator=g), torch.randint(0, 3, (640,), generator=g)
    return TensorDataset(x, y.to(labels))


def _fit(run_dir, extra=(), *, per_step=False, loss=None, labels=torch.int64, resume=None):
    cfg = trainwell.load_config(overrides=[*BASE, *extra, f"run.dir={run_dir}"])
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    return trainwell.fit(cfg, model=model, train_data=_data(labels), resume=resume,
                         loss_fn=loss or nn.CrossEntropyLoss(),
                         callbacks=[_PerStep()] if per_step else None)  # fmt: skip


@pytest.fixture
def paths(monkeypatch):
    """The steps each lean path ran (counted where the Trainer calls them)."""
    ran = {"loss_steps": 0, "plain_steps": 0}
    from trainwell.engine.loop import trainer

    for name in ran:
        real = getattr(trainer, name)

        def counted(stepper, steps, *args, _real=real, _name=name):
            loop = args[0]
            before = loop.step
            try:
                return _real(stepper, steps, *args)
            finally:
                ran[_name] += loop.step - before

        monkeypatch.setattr(trainer, name, counted)
    return ran


def _rows(run_dir) -> list[tuple[str, str, str]]:
    """metrics.csv's rows that are not times (the anatomy's shares, samples/s, step_ms) or
    the process's memory."""
    with open(run_dir / "metrics.csv", newline="") as f:
        return [(r["step"], r["name"], r["value"]) for r in csv.DictReader(f)
                if not r["name"].startswith(("time/", "samples_per_s", "mem/"))]  # fmt: skip


def _names(run_dir) -> set[str]:
    with open(run_dir / "metrics.csv", newline="") as f:
        return {r["name"] for r in csv.DictReader(f)}


def _same_weights(a: nn.Module, b: nn.Module) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


# Steps a flat schedule's counter cannot take yet call the step, with torch's scheduler
# step after it: the first (torch's step() takes its wrapper off optimizer.step then), a
# warmup's until its factor holds 1.0 (sched_step.steps_until_countable), every step of a
# cosine schedule.
@pytest.mark.parametrize("extra, inlined", [
    ([], 22),
    (["sched.warmup_steps=6"], 18),
    (["sched.name=cosine"], 0),
], ids=["constant", "warmup", "cosine"])  # fmt: skip
def test_each_run_takes_the_inlined_path_where_it_can_and_trains_alike(tmp_path, paths, extra,
                                                                       inlined):  # fmt: skip
    fast = _fit(tmp_path / "fast", extra)
    assert paths == {"loss_steps": inlined, "plain_steps": 23 - inlined}
    slow = _fit(tmp_path / "slow", extra, per_step=True)
    assert _rows(tmp_path / "fast") == _rows(tmp_path / "slow")
    # The anatomy's rows are there as in the per-step loop: data, compute, optim, step_ms.
    assert _names(tmp_path / "fast") == _names(tmp_path / "slow")
    assert _same_weights(fast.model, slow.model)


def test_the_anatomy_of_inlined_steps_adds_up(tmp_path, paths):
    _fit(tmp_path / "run")
    assert paths["loss_steps"] == 22
    with open(tmp_path / "run" / "metrics.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["step"] == "5" and r["split"] == "train"]
    shares = {r["name"]: float(r["value"]) for r in rows if r["name"].startswith("time/")}
    phases = {k: v for k, v in shares.items() if k != "time/step_ms"}
    assert {"time/data", "time/compute", "time/optim"} <= set(phases)
    assert phases["time/compute"] > 0 and phases["time/optim"] > 0
    assert sum(phases.values()) == pytest.approx(1.0, abs=1e-6)
    assert 0 < shares["time/step_ms"] < 1000


def test_int32_labels_train_as_in_the_per_step_loop(tmp_path, paths):
    fast = _fit(tmp_path / "fast", labels=torch.int32)
    assert paths["loss_steps"] == 22
    slow = _fit(tmp_path / "slow", per_step=True, labels=torch.int32)
    assert _rows(tmp_path / "fast") == _rows(tmp_path / "slow")
    assert _same_weights(fast.model, slow.model)


def test_the_running_loss_folds_inside_a_run_of_steps(tmp_path, paths, monkeypatch):
    # Folded every 4 values: several folds within one run of steps between log points.
    monkeypatch.setattr(MetricSums, "FOLD_EVERY", 4)
    fast = _fit(tmp_path / "fast", ["train.log_every=11"])
    slow = _fit(tmp_path / "slow", ["train.log_every=11"], per_step=True)
    assert paths["loss_steps"] == 22
    assert _rows(tmp_path / "fast") == _rows(tmp_path / "slow")
    assert _same_weights(fast.model, slow.model)


@pytest.mark.parametrize("per_step", [False, True], ids=["inlined", "per-step"])
def test_a_signal_in_an_inlined_step_stops_at_its_end_and_resumes_exactly(tmp_path, per_step):
    run = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        _fit(run, per_step=per_step, loss=_Loss(15))  # in step 15, the second epoch's 5th
    assert read_summary(run)["status"] == "interrupted"
    last = load_checkpoint(run / "checkpoints" / "last.pt")
    assert int(last["step"]) == 15 and last["scheduler"]["last_epoch"] == 15
    resumed = _fit(run, per_step=per_step, loss=_Loss(), resume="auto")
    whole = _fit(tmp_path / "whole", per_step=per_step, loss=_Loss())
    assert resumed.summary["steps"] == whole.summary["steps"] == 23
    assert _same_weights(resumed.model, whole.model)


def test_a_failing_loss_leaves_the_same_counters_as_the_per_step_loop(tmp_path, paths):
    summaries = []
    for name, per_step in (("fast", False), ("slow", True)):
        with pytest.raises(RuntimeError, match="the loss failed"):
            _fit(tmp_path / name, per_step=per_step, loss=_Loss(9, "raise"))  # in step 9
        summaries.append(read_summary(tmp_path / name))
    assert paths["loss_steps"] == 7  # steps 2-8 (step 1 is called: see above)
    fast, slow = summaries
    assert fast["status"] == slow["status"] == "failed"
    assert fast["steps"] == slow["steps"] == 8
    # The failing step's readings reached the clock: its anatomy is the per-step loop's.
    assert set(fast["time_shares"]) == set(slow["time_shares"]) >= {"data", "compute", "optim"}


def _stepper(loss_fn) -> Stepper:
    torch.manual_seed(0)
    net = nn.Linear(2, 3)
    return Stepper(net, LossStep(loss_fn), torch.optim.SGD(net.parameters(), lr=0.1),
                   Precision.build("fp32", CPU), 0.0, CPU, clock=StepClock(CPU))  # fmt: skip


@pytest.mark.parametrize("loss_fn, batch, message", [
    (nn.CrossEntropyLoss(reduction="none"), (torch.ones(4, 2), torch.tensor([0, 1, 2, 0])),
     "loss"),
    (nn.CrossEntropyLoss(), (torch.ones(4, 2), torch.tensor([0, 1, 2, 0]), torch.ones(4)),
     "3 elements"),
    (lambda out, y: 0.5, (torch.ones(4, 2), torch.tensor([0, 1, 2, 0])), "float"),
], ids=["not-a-scalar", "not-a-pair", "not-a-tensor"])  # fmt: skip
def test_a_step_that_cannot_train_fails_as_plain_step_does(loss_fn, batch, message):
    with pytest.raises(StepError, match=message) as plain:
        _stepper(loss_fn).plain_step(batch, MetricSums(CPU))
    stepper, loop = _stepper(loss_fn), SimpleNamespace(step=0, window=MetricSums(CPU))
    with pytest.raises(StepError) as inlined:
        lean.loss_steps(stepper, zip([batch]), loop, 10, SimpleNamespace(signum=None))
    assert str(inlined.value) == str(plain.value)
    assert loop.step == 0 and stepper.samples == 0


def test_loss_steps_stop_at_the_step_due_and_at_a_signal():
    batches = [(torch.ones(4, 2) * i, torch.tensor([0, 1, 2, 0])) for i in range(6)]
    stepper, sums = _stepper(nn.CrossEntropyLoss()), MetricSums(CPU)
    steps, flag = zip(batches), SimpleNamespace(signum=None)
    loop = SimpleNamespace(step=0, window=sums)
    assert lean.loss_steps(stepper, steps, loop, 2, flag) is False  # due at step 2
    assert loop.step == 2 and stepper.samples == 8
    flag.signum = signal.SIGTERM  # pending: the next step is the run's last
    assert lean.loss_steps(stepper, steps, loop, 10, flag) is False
    assert loop.step == 3
    flag.signum = None
    assert lean.loss_steps(stepper, steps, loop, 10, flag) is True  # ran out
    assert loop.step == 6 and stepper.samples == 24
    assert stepper.clock is not None and stepper.clock.window()["time/step_ms"] > 0
    # The same losses as plain_step's, step for step.
    other, other_sums = _stepper(nn.CrossEntropyLoss()), MetricSums(CPU)
    for batch in batches:
        other.plain_step(batch, other_sums)
    assert sums.means() == other_sums.means()
    assert _same_weights(stepper.net, other.net)


def test_fusable_only_for_the_engines_own_loss_step():
    assert lean.fusable(_stepper(nn.CrossEntropyLoss()))

    class Louder(LossStep):  # a subclass may do more per step
        pass

    net = nn.Linear(2, 3)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    fp32 = Precision.build("fp32", CPU)
    for step, clip, clock in ((Louder(nn.CrossEntropyLoss()), 0.0, StepClock(CPU)),
                              (LossStep(nn.CrossEntropyLoss(), accuracy=True), 0.0, StepClock(CPU)),
                              (LossStep(nn.CrossEntropyLoss()), 1.0, StepClock(CPU)),
                              (LossStep(nn.CrossEntropyLoss()), 0.0, None)):  # fmt: skip
        assert not lean.fusable(Stepper(net, step, opt, fp32, clip, CPU, clock=clock))


def test_pending_lists_left_empty_fold_to_nothing():
    sums = MetricSums(CPU)
    values, counts = sums.pending_of("loss")
    assert sums.empty and sums.means() == {} and sums.state_dict()["pending"] == {}
    values, counts = sums.pending_of("loss")  # means() folded: new lists
    values.append(torch.tensor(2.0))
    counts.append(4)
    assert not sums.empty and sums.means() == {"loss": 2.0}
