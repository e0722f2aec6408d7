"""The lean loop (``Trainer.lean_steps``) trains exactly as train_step + after_step do.

Where nothing runs every step (fp32 on the CPU, no clipping, one process, no
``on_step_end`` callback), an epoch's steps run in one frame, after_step only at the
steps where it has work, and a flat schedule's steps are counted there at once. Each
run here is compared with the same run through the per-step loop, which a no-op
``on_step_end`` callback selects: the same losses and lrs at every log point, the same
weights, the same scheduler state in every checkpoint, the same stop at a signal.
"""

from __future__ import annotations

import csv
import os
import signal

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import trainwell
from tests.conftest import read_summary
from trainwell.engine.checkpointing.checkpoint import load_checkpoint
from trainwell.engine.loop.trainer import Trainer

# 640 samples in batches of 64: 10 steps an epoch; 23 steps end inside the third epoch.
# Log points every 3 steps and step-N checkpoints every 4 fall on no epoch boundary.
BASE = ["train.precision=fp32", "doctor.enabled=false", "run.device=cpu", "train.grad_clip=0",
        "data.batch_size=64", "data.num_workers=0", "train.epochs=3", "train.max_steps=23",
        "train.log_every=3", "checkpoint.every_steps=4", "checkpoint.keep_last=10",
        "early_stop.patience=0"]  # fmt: skip


class _PerStep:
    """A callback with on_step_end: the loop takes train_step + after_step every step."""

    def __init__(self) -> None:
        self.steps = 0

    def on_step_end(self, ctx) -> None:
        self.steps += 1


def _data() -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(640, 8, generator=g), torch.randint(0, 3, (640,), generator=g))


def _fit(run_dir, extra, *, per_step: bool, step_fn=None, resume=None):
    cfg = trainwell.load_config(overrides=[*BASE, *extra, f"run.dir={run_dir}"])
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    callbacks = [_PerStep()] if per_step else None
    loss_fn = None if step_fn else nn.CrossEntropyLoss()
    return trainwell.fit(cfg, model=model, train_data=_data(), loss_fn=loss_fn, step_fn=step_fn,
                         callbacks=callbacks, resume=resume)  # fmt: skip


def _rows(run_dir) -> list[tuple[str, str, str, str]]:
    """metrics.csv's train loss and lr rows, and every epoch-end row (the step anatomy's
    shares and the samples/s are times: they differ between any two runs)."""
    with open(run_dir / "metrics.csv", newline="") as f:
        return [(r["step"], r["split"], r["name"], r["value"]) for r in csv.DictReader(f)
                if r["name"] in ("loss", "lr") or r["split"] != "train"]  # fmt: skip


def _schedules(run_dir) -> dict[str, tuple]:
    """Each checkpoint's scheduler counters and step."""
    out = {}
    for path in sorted((run_dir / "checkpoints").glob("*.pt")):
        state = load_checkpoint(path)
        sched = state["scheduler"]
        out[path.name] = (int(state["step"]), sched["last_epoch"], sched["_step_count"])
    return out


@pytest.fixture
def lean_calls(monkeypatch):
    """How many epochs ran through Trainer.lean_steps."""
    calls = []
    real = Trainer.lean_steps

    def counted(self, steps):
        calls.append(self.loop.epoch)
        return real(self, steps)

    monkeypatch.setattr(Trainer, "lean_steps", counted)
    return calls


@pytest.mark.parametrize("extra", [
    ["sched.name=constant"],
    ["sched.name=constant", "sched.warmup_steps=5"],  # counted once the warmup is over
    ["sched.name=cosine", "sched.warmup_steps=2"],  # torch's step() every step
], ids=["constant", "warmup", "cosine"])  # fmt: skip
def test_the_lean_loop_trains_as_the_per_step_loop(tmp_path, lean_calls, extra):
    lean = _fit(tmp_path / "lean", extra, per_step=False)
    assert lean_calls == [0, 1, 2]  # every epoch took the lean loop
    lean_calls.clear()
    slow = _fit(tmp_path / "slow", extra, per_step=True)
    assert lean_calls == []
    assert lean.summary["steps"] == slow.summary["steps"] == 23
    rows = _rows(tmp_path / "lean")
    assert rows == _rows(tmp_path / "slow")
    # Log points every 3 steps and at the last; nothing logged in between.
    assert sorted({int(step) for step, split, name, _ in rows if name == "loss"}) == [
        *range(3, 22, 3), 23]
    assert _schedules(tmp_path / "lean") == _schedules(tmp_path / "slow")
    steps = {name: s for name, (s, _, _) in _schedules(tmp_path / "lean").items()}
    assert steps == {"step-4.pt": 4, "step-8.pt": 8, "step-12.pt": 12, "step-16.pt": 16,
                     "step-20.pt": 20, "last.pt": 23, "best.pt": steps["best.pt"]}  # fmt: skip
    for name, (step, last_epoch, count) in _schedules(tmp_path / "lean").items():
        assert (last_epoch, count) == (step, step + 1), name  # a scheduler step per step
    for a, b in zip(lean.model.parameters(), slow.model.parameters()):
        assert torch.equal(a, b)


def _signal_at(k: int):
    """A step function that sends this process SIGTERM in its k-th call."""
    calls = []

    def step(model, batch):
        calls.append(1)
        if len(calls) == k:
            os.kill(os.getpid(), signal.SIGTERM)  # the handler only sets a flag
        x, y = batch
        return nn.functional.cross_entropy(model(x), y)

    return step


@pytest.mark.parametrize("per_step", [False, True], ids=["lean", "per-step"])
def test_a_signal_in_a_lean_step_stops_at_its_end_and_resumes_exactly(tmp_path, per_step):
    extra = ["sched.name=constant"]
    run = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        # Step 14, the second epoch's 4th (the first call is the dry step before training).
        _fit(run, extra, per_step=per_step, step_fn=_signal_at(15))
    assert read_summary(run)["status"] == "interrupted"
    assert _schedules(run)["last.pt"] == (14, 14, 15)  # the step it arrived in was finished
    resumed = _fit(run, extra, per_step=per_step, step_fn=_signal_at(0), resume="auto")
    whole = _fit(tmp_path / "whole", extra, per_step=per_step, step_fn=_signal_at(0))
    assert resumed.summary["steps"] == whole.summary["steps"] == 23
    for a, b in zip(resumed.model.parameters(), whole.model.parameters()):
        assert torch.equal(a, b)
