"""The lean step's own work, counted: which of trainwell's functions one optimizer step calls,
and how often, with nothing configured that needs more (fp32, no clipping, a constant
schedule, no callbacks or loggers, no log point, one process). Counts, never times: the
same on a busy machine. A function that starts running every step (a dispatch to no
callback, a log dict built on a non-log step, a collective on one process, torch's
scheduler step for a flat schedule) fails here by name; ``benchmarks/overhead.py`` says
what the step costs in time.
"""

from __future__ import annotations

import cProfile
import gc
import pstats
import warnings
from collections import Counter

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import trainwell
from trainwell.engine.build.sched_step import (
    flat_counter,
    mark_flat,
    scheduler_step,
    steps_until_countable,
)

LEAN = ["train.precision=fp32", "doctor.enabled=false", "run.device=cpu", "sched.name=constant",
        "train.grad_clip=0", "data.batch_size=16", "train.epochs=1", "train.log_every=1000",
        "checkpoint.every_steps=0", "early_stop.patience=0"]  # fmt: skip

# Per optimizer step, by function name: the lean loop (Trainer.lean_steps: runs of steps in
# one frame, after_step only at steps with work) with the engine's loss step inlined
# (trainwell/engine/step/lean.py: loss_steps): the batch's sample count and its (input,
# target) split; the step anatomy's readings and the loss's note are inline. A flat
# schedule's steps are counted at log points, not per step; the added-groups check runs
# only after a group was added; the data's steps are drawn in C (no generator of ours).
# Nothing else.
PER_STEP = {"sample_count": 1, "pair": 1}
# Lean steps that call the step (plain_steps: a schedule stepped every step, a user's step
# function): the step (fp32 on the CPU, one micro-batch: the Stepper's straight path), the
# loss, its running sum and the step anatomy's three marks (data, compute, optim).
PER_STEP_PLAIN = {
    "__call__": 1,  # the LossStep
    "pair": 1,
    "plain_step": 1,
    "unpack": 1,
    "sample_count": 1,
    "add": 1,  # MetricSums: the loss noted (a list append)
    "mark": 3,  # the last one counts the step
}
# With a callback's on_step_end (or anything else that runs every step), each step is
# train_step then after_step, as Trainer.train reads.
PER_STEP_CALLED = {**PER_STEP_PLAIN, "train_step": 1, "after_step": 1, "__call__": 2, "mark": 4,
                   "step": 1}  # fmt: skip


def _data(n: int = 640) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 8, generator=g), torch.randint(0, 3, (n,), generator=g))


def _calls(tmp_path, steps: int, extra: list[str], callbacks=None) -> tuple[Counter, Counter]:
    """Calls of trainwell's functions (by name) and of torch's scheduler step in a run of
    ``steps`` steps (one epoch of 40, one log point at the end)."""
    cfg = trainwell.load_config(overrides=[*LEAN, *extra, f"train.max_steps={steps}",
                                           f"run.dir={tmp_path / str(steps)}"])  # fmt: skip
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    profile = cProfile.Profile()
    # Earlier runs' garbage (a run lock's __del__) must not be collected inside this one's
    # count: collected now, and no collection while counting.
    gc.collect()
    gc.disable()
    profile.enable()
    try:
        trainwell.fit(cfg, model=model, train_data=_data(), loss_fn=nn.CrossEntropyLoss(),
                      callbacks=callbacks)  # fmt: skip
    finally:
        profile.disable()
        gc.enable()
    ours, torch_calls = Counter(), Counter()
    for (path, _line, name), (_prim, calls, *_rest) in pstats.Stats(profile).stats.items():
        if "/trainwell/" in path.replace("\\", "/"):
            ours[name] += calls
        elif path.replace("\\", "/").endswith("torch/optim/lr_scheduler.py"):
            torch_calls[name] += calls
    return ours, torch_calls


def _per_step(tmp_path, extra: list[str], callbacks=None, warm=True) -> tuple[dict, dict]:
    """Calls per step: the difference of a 10-step and a 30-step run, over 20 steps (set-up,
    the log point and the epoch's end are alike in both and cancel). ``warm=False`` where
    a run of the same config has just warmed the caches."""
    if warm:
        _calls(tmp_path / "warm", 10, extra, callbacks)  # first imports and first-call caches
    (few, torch_few), (many, torch_many) = (
        _calls(tmp_path / "a", 10, extra, callbacks),
        _calls(tmp_path / "b", 30, extra, callbacks),
    )

    def diff(a: Counter, b: Counter) -> dict:
        return {k: (b[k] - a[k]) / 20 for k in set(a) | set(b) if b[k] != a[k]}

    return diff(few, many), diff(torch_few, torch_many)


def test_the_lean_step_calls_only_its_own_work(tmp_path):
    ours, from_torch = _per_step(tmp_path, [])
    assert ours == PER_STEP, f"per-step calls changed: {sorted(ours.items())}"
    # torch's LambdaLR.step (about fifteen calls) does not run for a flat schedule, and
    # the wrapper it put on optimizer.step is gone after the first step: nothing of torch's
    # scheduler runs per step.
    assert from_torch == {}, from_torch


@pytest.mark.parametrize("warmup", [1, 7])
def test_past_its_warmup_a_constant_schedule_only_counts(tmp_path, warmup):
    # Both runs step torch's scheduler through the same warmup; after it, neither does.
    ours, from_torch = _per_step(tmp_path, [f"sched.warmup_steps={warmup}"])
    assert ours == PER_STEP and from_torch == {}, (ours, from_torch)


@pytest.mark.parametrize("name", ["cosine"])
def test_a_changing_schedule_steps_torchs_scheduler_every_step(tmp_path, name):
    ours, from_torch = _per_step(tmp_path, [f"sched.name={name}"])
    assert from_torch.get("step") == 1, from_torch
    # No fast path for it (no count on the side), and the rest of the step is unchanged;
    # the lr per group is the schedule's own (lr_factor and its warmup, per group).
    assert "step" not in ours  # sched_step's flat-schedule count did not run
    schedule = ("<lambda>", "lr_factor", "warmup_length", "is_import_path")
    assert {k: v for k, v in ours.items() if k not in schedule} == PER_STEP_PLAIN


def test_a_flat_schedule_takes_off_torchs_step_wrapper_after_its_first_step():
    param = nn.Parameter(torch.ones(1))
    opt = torch.optim.SGD([param], lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, mark_flat(lambda step: 1.0, 0))
    step = scheduler_step(sched)
    assert getattr(vars(opt).get("step"), "_wrapped_by_lr_sched", False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's call-order warnings would fail here
        opt.step()
        step()  # torch's first step(): it reads the wrapper's note
        assert "step" not in vars(opt)
        for _ in range(3):
            opt.step()
            step()
        opt.param_groups[0]["lr"] = 0.05  # a changed lr takes torch's real step() again
        opt.step()
        step()
    assert (sched.last_epoch, sched._step_count) == (5, 6)
    assert opt.param_groups[0]["lr"] == 0.1  # the flat schedule's peak, set back by torch


def test_any_other_scheduler_keeps_torchs_step_wrapper():
    param = nn.Parameter(torch.ones(1))
    opt = torch.optim.SGD([param], lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.5 ** step)  # not marked
    step = scheduler_step(sched)
    for _ in range(3):
        opt.step()
        step()
    assert getattr(vars(opt).get("step"), "_wrapped_by_lr_sched", False)


class _StepCounter:
    def __init__(self) -> None:
        self.steps = 0

    def on_step_end(self, ctx) -> None:
        self.steps += 1


class _EvalOnly:
    def on_eval_end(self, ctx) -> None:
        pass


def test_callbacks_are_dispatched_per_step_only_when_one_has_on_step_end(tmp_path):
    # A callback without on_step_end: nothing more per step than with none.
    ours, _ = _per_step(tmp_path / "eval", [], callbacks=[_EvalOnly()])
    assert ours == PER_STEP
    # One with on_step_end: the dispatch runs, once a step.
    counter = _StepCounter()
    # The same config, just counted and warmed: no second warm-up run.
    ours, _ = _per_step(tmp_path / "step", [], callbacks=[counter], warm=False)
    assert ours["notify"] == 1 and ours["call"] == 1, sorted(ours.items())
    dispatch = ("notify", "call", "has", "read_only", "active", "foreign", "is_main")
    rest = {k: v for k, v in ours.items() if k not in dispatch}
    assert rest == PER_STEP_CALLED, repr(sorted(ours.items()))
    assert counter.steps == 10 + 30  # the two counted runs


class _Nudger:
    """Sets group 0's lr at every step's end; notes what the lr was before it did."""

    def __init__(self, lr: float) -> None:
        self.lr, self.seen = lr, []

    def on_step_end(self, ctx) -> None:
        groups = ctx.optimizer.param_groups
        self.seen.append([g["lr"] for g in groups])
        groups[0]["lr"] = self.lr


@pytest.mark.parametrize("lr, peak", [(0.5, 0.003), (0.003, 0.003), (1e-4, 0.02)])
def test_a_flat_schedule_still_sets_the_lr_a_callback_changed(tmp_path, lr, peak):
    # As with torch's LambdaLR.step: the scheduler puts back the schedule's lr after each
    # optimizer step, whatever a callback set (the fast path counts only when every group
    # already holds its peak).
    nudger = _Nudger(lr)
    cfg = trainwell.load_config(overrides=[*LEAN, "train.max_steps=6", f"optim.lr={peak}",
                                           f"run.dir={tmp_path / 'run'}"])  # fmt: skip
    result = trainwell.fit(cfg, model=nn.Linear(8, 3), train_data=_data(),
                           loss_fn=nn.CrossEntropyLoss(), callbacks=[nudger])  # fmt: skip
    assert [seen[0] for seen in nudger.seen] == [peak] * 6
    assert len(nudger.seen[0]) == 2  # both groups (decay, no decay) followed
    assert result.summary["steps"] == 6


def test_a_flat_schedule_is_counted_at_once_only_while_every_group_holds_its_peak():
    net = nn.Linear(2, 2)
    opt = torch.optim.SGD([{"params": [net.weight]}, {"params": [net.bias], "lr": 0.2}], lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, mark_flat(lambda step: 1.0, 0))
    assert flat_counter(sched) is None  # torch's first step() is still to come
    opt.step()
    scheduler_step(sched)()
    count = flat_counter(sched)
    assert count is not None
    count(4)
    assert (sched.last_epoch, sched._step_count) == (5, 6)
    opt.param_groups[1]["lr"] = 0.05  # changed (a callback): torch's step() must set it back
    assert flat_counter(sched) is None
    opt.param_groups[1]["lr"] = 0.2
    opt.add_param_group({"params": [nn.Parameter(torch.ones(1))], "lr": 0.1})
    assert flat_counter(sched) is None  # a group the scheduler does not know yet
    warm = torch.optim.lr_scheduler.LambdaLR(opt, mark_flat(lambda step: min(1.0, step / 5), 5))
    assert steps_until_countable(warm) == 4


def test_the_added_groups_check_runs_once_after_each_added_group_and_not_per_step():
    from trainwell.engine.checkpointing.added_groups import track_added_groups

    net = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    opt = torch.optim.SGD(net[0].parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.5)
    track_added_groups(opt, sched)
    assert not opt._optimizer_step_pre_hooks  # nothing runs per step before a group is added
    for i, layer in enumerate([net[1], nn.Linear(2, 2)]):  # two additions, steps apart
        opt.add_param_group({"params": layer.parameters(), "lr": 0.01})
        assert len(opt._optimizer_step_pre_hooks) == 1
        net(torch.ones(1, 2)).sum().backward()
        opt.step()
        sched.step()  # torch's step() would fail on a group the scheduler does not know
        assert not opt._optimizer_step_pre_hooks
        assert [g["lr"] for g in opt.param_groups] == [0.05, 0.005] + [0.005] * i
