"""The Checkpointer on its own: save into a run directory, load into fresh objects.

Fresh objects are built from another seed, so that a restore that forgot a piece shows.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from torch import nn

from tests.unit.engine.unit_engine_kit import CPU, FakeLogger, config, lr_factor
from trainwell.engine.checkpointing import checkpoint as ckpt
from trainwell.engine.checkpointing.checkpointer import Checkpointer
from trainwell.engine.distributed.placement import Placement
from trainwell.engine.run_dir.directory import CsvLogger, RunDir
from trainwell.engine.state.callbacks import Callbacks
from trainwell.engine.state.early_stopping import EarlyStopping
from trainwell.engine.state.loop_state import LoopState
from trainwell.engine.step.precision import Precision
from trainwell.errors import UserError
from trainwell.loggers import Loggers


class Counter:
    """A stateful callback: its count goes in the checkpoint."""

    def __init__(self):
        self.count = 0

    def on_step_end(self, ctx):
        self.count += 1

    def state_dict(self):
        return {"count": self.count}

    def load_state_dict(self, state):
        self.count = state["count"]


def _parts(seed, *, lr=0.1, momentum=0.9, scheduler="lambda", width=3):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(width, 4), nn.ReLU(), nn.Linear(4, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    if scheduler == "lambda":
        sched = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
    else:
        sched = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.3)
    stopper = EarlyStopping("val/loss", "min", patience=3, min_delta=0.0)
    loop = LoopState(CPU)
    callbacks = Callbacks([Counter()])
    checkpointer = Checkpointer(config(), Placement(CPU), model, optimizer, sched,
                                Precision.build("fp32", CPU), stopper, loop, callbacks)  # fmt: skip
    return checkpointer


def _train(c, steps, seed=0):
    """A few real SGD steps with momentum, and the loop's counters and sums as a run
    would leave them mid-epoch."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x, y = torch.randn(4, 3, generator=g), torch.randn(4, 2, generator=g)
        c.optimizer.zero_grad()
        loss = ((c.model(x) - y) ** 2).mean()
        loss.backward()
        c.optimizer.step()
        c.scheduler.step()
        c.loop.step += 1
        c.loop.window.add({"loss": loss.detach()}, 4)
    c.loop.epoch, c.loop.epoch_start_step = 1, c.loop.step - 2
    c.loop.close_window()
    c.loop.window.add({"loss": torch.tensor(0.25)}, 4)
    c.loop.best = {"metric": "val/loss", "value": 0.5, "step": 2, "epoch": 0}
    c.loop.metrics = {"val/loss": 0.5, "train/loss": 0.75}
    c.loop.amp_skipped += 3
    for v in (1.0, 0.5, 0.7):
        c.stopper.update(v)
    c.callbacks.objects[0].count = steps


def _loggers(run, loop, fake):
    return Loggers([("csv", CsvLogger(run, epoch=lambda: loop.epoch)), ("fake", fake)],
                   say=lambda line: None, essential=("csv",))  # fmt: skip


@pytest.fixture
def saved(tmp_path):
    c = _parts(seed=0)
    _train(c, 5)
    run = RunDir.create(tmp_path / "run")
    fake = FakeLogger({"run_id": "abc", "step": 5})
    loggers = _loggers(run, c.loop, fake)
    loggers.log_metrics(5, {"train/loss": 0.75, "train/lr": 0.01})
    c.save(run, loggers, ["last.pt", "best.pt"])
    # What each random stream draws next, right after the save: a resume continues here.
    c.next_draws = (torch.rand(3), random.random(), np.random.rand(2))
    return c, run, fake


def test_save_then_load_into_fresh_objects_restores_every_piece(saved):
    c, run, _ = saved
    state = ckpt.load_checkpoint(run.checkpoints / "last.pt")
    fresh = _parts(seed=1)
    assert not torch.equal(fresh.model[0].weight, c.model[0].weight)  # it would show
    fresh.load_state_dict(state)
    for (name, a), (_, b) in zip(c.model.state_dict().items(), fresh.model.state_dict().items()):
        assert torch.equal(a, b), name
    old, new = c.optimizer.state_dict(), fresh.optimizer.state_dict()
    assert old["param_groups"] == new["param_groups"]
    for i in old["state"]:
        assert torch.equal(old["state"][i]["momentum_buffer"], new["state"][i]["momentum_buffer"])
    assert fresh.scheduler.last_epoch == 5 == c.scheduler.last_epoch
    assert fresh.optimizer.param_groups[0]["lr"] == pytest.approx(0.1 * 0.5**5)
    assert (fresh.loop.step, fresh.loop.epoch, fresh.loop.steps_into_epoch) == (5, 1, 2)
    assert fresh.loop.window.means() == c.loop.window.means()
    assert fresh.loop.epoch_sums.means() == c.loop.epoch_sums.means()
    assert fresh.loop.best == c.loop.best and fresh.loop.metrics == c.loop.metrics
    assert int(fresh.loop.amp_skipped) == 3
    assert (fresh.stopper.best, fresh.stopper.bad_evals) == (0.5, 1)
    assert fresh.callbacks.objects[0].count == 5


def test_both_names_hold_the_same_state(saved):
    _, run, _ = saved
    last = ckpt.load_checkpoint(run.checkpoints / "last.pt")
    best = ckpt.load_checkpoint(run.checkpoints / "best.pt")
    assert last["step"] == best["step"] == 5
    assert all(torch.equal(last["model"][k], best["model"][k]) for k in last["model"])


def test_the_loggers_state_goes_in_and_they_are_flushed_first(saved):
    _, run, fake = saved
    state = ckpt.load_checkpoint(run.checkpoints / "last.pt")
    assert state["loggers"] == {"fake": {"run_id": "abc", "step": 5}}
    assert ("flush", None) in fake.calls
    # The metric rows are on disk and counted: a resume keeps exactly these.
    assert state["log_rows"] == 2 == len(run.metrics_path.read_text().splitlines()) - 1


def test_the_checkpoint_holds_only_plain_data_and_the_config(saved):
    _, run, _ = saved
    raw = torch.load(run.checkpoints / "last.pt", weights_only=True)  # no pickled code
    assert raw["format"] == ckpt.FORMAT
    assert raw["config"]["train"]["log_every"] == 1
    assert raw["data"] == {"seed": 0, "epoch": 1, "steps_into_epoch": 2}


def test_restore_rng_continues_every_stream_as_after_the_save(saved):
    c, run, _ = saved
    state = ckpt.load_checkpoint(run.checkpoints / "last.pt")
    expected = c.next_draws
    torch.manual_seed(123), random.seed(123), np.random.seed(123)
    fresh = _parts(seed=7)
    fresh.load_state_dict(state)
    fresh.restore_rng(state)
    got = (torch.rand(3), random.random(), np.random.rand(2))
    assert torch.equal(got[0], expected[0]) and got[1] == expected[1]
    np.testing.assert_array_equal(got[2], expected[2])


def test_the_rng_saved_is_the_state_at_the_save(tmp_path):
    c = _parts(seed=0)
    run = RunDir.create(tmp_path / "run")
    torch.manual_seed(42)
    random.seed(42)
    after = (torch.rand(2), random.random())  # drawn from the stream after seeding 42
    torch.manual_seed(42)
    random.seed(42)
    c.save(run, Loggers([], say=lambda line: None), ["last.pt"])
    torch.manual_seed(0), random.seed(0)
    c.restore_rng(ckpt.load_checkpoint(run.checkpoints / "last.pt"))
    assert torch.equal(torch.rand(2), after[0]) and random.random() == after[1]


def test_a_changed_lr_takes_effect_on_a_lambda_schedule(saved):
    # The configured lr wins over the saved one: base lr * factor(step).
    _, run, _ = saved
    fresh = _parts(seed=1, lr=0.4)
    fresh.load_state_dict(ckpt.load_checkpoint(run.checkpoints / "last.pt"))
    assert fresh.scheduler.base_lrs == [0.4]
    assert fresh.optimizer.param_groups[0]["lr"] == pytest.approx(0.4 * 0.5**5)


def test_another_scheduler_loads_its_own_state(tmp_path):
    c = _parts(seed=0, scheduler="step")
    _train(c, 5)
    run = RunDir.create(tmp_path / "run")
    c.save(run, Loggers([], say=lambda line: None), ["last.pt"])
    fresh = _parts(seed=1, scheduler="step")
    fresh.load_state_dict(ckpt.load_checkpoint(run.checkpoints / "last.pt"))
    assert fresh.scheduler.last_epoch == 5
    # StepLR(step_size=2, gamma=0.3) after 5 steps: 0.1 * 0.3**2.
    assert fresh.optimizer.param_groups[0]["lr"] == pytest.approx(0.1 * 0.3**2)


def test_a_checkpoint_of_another_model_is_refused_in_one_line(saved):
    _, run, _ = saved
    other = _parts(seed=1, width=5)
    with pytest.raises(UserError, match="the checkpoint does not fit this model"):
        other.load_state_dict(ckpt.load_checkpoint(run.checkpoints / "last.pt"))


def test_a_checkpoint_without_running_sums_restores_the_counters(saved):
    # Written before the loop's sums were saved: counters from the top-level fields.
    _, run, _ = saved
    state = ckpt.load_checkpoint(run.checkpoints / "last.pt")
    del state["loop"]
    fresh = _parts(seed=1)
    fresh.load_state_dict(state)
    assert (fresh.loop.step, fresh.loop.epoch, fresh.loop.steps_into_epoch) == (5, 1, 2)
    assert fresh.loop.best["value"] == 0.5 and fresh.loop.metrics["train/loss"] == 0.75


def test_a_save_that_cannot_write_is_one_clear_error(tmp_path):
    c = _parts(seed=0)
    run = RunDir.create(tmp_path / "run")
    run.checkpoints.rmdir()
    run.checkpoints.write_text("not a folder")  # works as root too, unlike chmod
    with pytest.raises(UserError, match="could not write checkpoint"):
        c.save(run, Loggers([], say=lambda line: None), ["last.pt"])


def test_load_best_weights_says_whose_weights_the_model_holds(saved, tmp_path):
    c, run, _ = saved
    best_weight = c.model[0].weight.detach().clone()
    with torch.no_grad():
        c.model[0].weight.add_(1.0)
    c.loop.step = 9
    assert c.load_best_weights(run) == "best.pt (step 5)"
    assert torch.equal(c.model[0].weight, best_weight)
    empty = RunDir.create(tmp_path / "empty")
    assert c.load_best_weights(empty) == "last (step 9)"


def _good_file(tmp_path):
    path = tmp_path / "last.pt"
    ckpt.save_atomic({"model": {"w": torch.ones(1000)}, "step": 1}, path)
    return path


@pytest.mark.parametrize("cut", [0.5, 0.9, 0.1])
def test_a_truncated_file_is_refused_naming_it(tmp_path, cut):
    path = _good_file(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * cut)])
    with pytest.raises(UserError, match=r"checkpoint .*last\.pt is truncated or not a checkpoint"):
        ckpt.load_checkpoint(path)


def test_an_empty_file_is_refused(tmp_path):
    path = tmp_path / "last.pt"
    path.write_bytes(b"")
    with pytest.raises(UserError, match=r"is empty \(0 bytes\): it was never fully written"):
        ckpt.load_checkpoint(path)


def test_garbage_bytes_are_refused(tmp_path):
    path = tmp_path / "last.pt"
    path.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(UserError, match="last.pt is (truncated or not a checkpoint|corrupt)"):
        ckpt.load_checkpoint(path)


def test_a_missing_file_and_a_foreign_dict_are_refused(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        ckpt.load_checkpoint(tmp_path / "nope.pt")
    other = tmp_path / "other.pt"
    torch.save({"weights": torch.ones(2)}, other)
    with pytest.raises(UserError, match="is not a trainwell checkpoint"):
        ckpt.load_checkpoint(other)


def test_a_file_of_a_newer_format_is_refused(tmp_path):
    path = tmp_path / "new.pt"
    torch.save({"model": {}, "format": ckpt.FORMAT + 1,
                "versions": {"trainwell": "99.0"}}, path)  # fmt: skip
    with pytest.raises(ckpt.TooNew, match=r"format 2 \(written by trainwell 99.0\)"):
        ckpt.load_checkpoint(path)


def test_a_flipped_byte_inside_is_never_loaded_silently_as_other_weights(tmp_path):
    path = _good_file(tmp_path)
    data = bytearray(path.read_bytes())
    # The zip's central directory is at the end; damage it.
    data[-30] ^= 0xFF
    path.write_bytes(bytes(data))
    try:
        state = ckpt.load_checkpoint(path)
    except UserError as exc:
        assert "last.pt" in str(exc)
    else:  # a byte the reader never needs: then what loads is the saved state
        assert torch.equal(state["model"]["w"], torch.ones(1000))
