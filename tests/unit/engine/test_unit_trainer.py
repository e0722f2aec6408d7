"""The Trainer built by hand (no ``fit``): steps, hooks, checkpoints' points, stops.

Expected weights and losses come from :func:`sgd_by_hand` (float64, gradients written out),
not from a run.
"""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest
import torch

from tests.unit.engine import unit_engine_kit as kit
from tests.unit.engine.unit_engine_kit import make_trainer, mse, samples, sgd_by_hand
from trainwell.engine.checkpointing.checkpoint import load_checkpoint
from trainwell.engine.run_dir.metric_rows import read_rows
from trainwell.engine.state.signals import GracefulStop, Interrupted
from trainwell.errors import Diverged


def _initial():
    # make_model(seed=0) is an nn.Linear(3, 1) drawn after manual_seed(0).
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 1)
    return lin.weight.detach().numpy().copy(), lin.bias.detach().numpy().copy()


def _rows(kit, name, split="train"):
    rows = read_rows(kit.run.metrics_path)
    return [(s, v) for s, _e, sp, n, v in rows if (sp, n) == (split, name)]


class Recorder:
    """Every hook, with the context it was given."""

    def __init__(self):
        self.seen = []

    def _note(self, event, ctx):
        self.seen.append((event, ctx.step, ctx.epoch, ctx.checkpoint, ctx))

    def on_fit_start(self, ctx):
        self._note("on_fit_start", ctx)

    def on_step_end(self, ctx):
        self._note("on_step_end", ctx)

    def on_eval_end(self, ctx):
        self._note("on_eval_end", ctx)

    def on_checkpoint(self, ctx):
        self._note("on_checkpoint", ctx)

    def on_fit_end(self, ctx):
        self._note("on_fit_end", ctx)


@pytest.mark.parametrize("epochs", [1, 2, 3])
def test_train_takes_epochs_times_batches_steps_and_the_weights_of_sgd_by_hand(tmp_path, epochs):
    kit = make_trainer(tmp_path / "run", f"train.epochs={epochs}")
    w0, b0 = _initial()
    reason = kit.trainer.train(resumed=False)
    assert reason == "epochs"
    assert kit.loop.step == 4 * epochs and kit.loop.epoch == epochs - 1
    assert kit.scheduler.last_epoch == 4 * epochs  # one scheduler step per optimizer step
    w, b = sgd_by_hand(w0, b0, kit.data, 4 * epochs)
    np.testing.assert_allclose(kit.model.weight.detach().numpy(), w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(kit.model.bias.detach().numpy(), b, rtol=1e-5, atol=1e-6)
    assert kit.trainer.done


def test_each_logged_train_loss_is_its_batchs_loss_before_the_update(tmp_path):
    kit = make_trainer(tmp_path / "run")
    w0, b0 = _initial()
    kit.trainer.train(resumed=False)
    logged = _rows(kit, "loss")
    assert [s for s, _ in logged] == list(range(1, 9))
    for step, value in logged:
        w, b = sgd_by_hand(w0, b0, kit.data, step - 1)
        i = ((step - 1) % 4) * 2
        assert value == pytest.approx(mse(w, b, kit.data[i : i + 2]), rel=1e-5)
    lrs = _rows(kit, "lr")  # after the step's scheduler step: 0.1 * 0.5**step
    assert [v for _, v in lrs] == pytest.approx([0.1 * 0.5**s for s in range(1, 9)])


def test_log_every_writes_the_window_mean_at_its_log_points(tmp_path):
    kit = make_trainer(tmp_path / "run", "train.log_every=3", "train.epochs=1")
    w0, b0 = _initial()
    kit.trainer.train(resumed=False)
    logged = _rows(kit, "loss")
    assert [s for s, _ in logged] == [3, 4]  # every 3 steps, and the last step
    by_step = []
    for k in range(4):
        w, b = sgd_by_hand(w0, b0, kit.data, k)
        by_step.append(mse(w, b, kit.data[2 * k : 2 * k + 2]))
    assert logged[0][1] == pytest.approx(np.mean(by_step[:3]), rel=1e-5)
    assert logged[1][1] == pytest.approx(by_step[3], rel=1e-5)
    # The epoch's mean is over all four steps, each batch counted once.
    assert kit.loop.metrics["train/loss"] == pytest.approx(np.mean(by_step), rel=1e-5)


def test_hooks_come_in_order_with_the_documented_context(tmp_path):
    rec = Recorder()
    kit = make_trainer(tmp_path / "run", callbacks=[rec])
    w0, b0 = _initial()
    kit.trainer.train(resumed=False)
    val = samples(4, seed=1)
    val4, val8 = (mse(*sgd_by_hand(w0, b0, kit.data, n), val) for n in (4, 8))
    second = ("best.pt", "last.pt") if val8 < val4 else ("last.pt",)
    expected = [("on_fit_start", 0, 0, ())]
    expected += [("on_step_end", s, 0, ()) for s in range(1, 5)]
    expected += [("on_eval_end", 4, 0, ()), ("on_checkpoint", 4, 0, ("best.pt", "last.pt"))]
    expected += [("on_step_end", s, 1, ()) for s in range(5, 9)]
    expected += [("on_eval_end", 8, 1, ()), ("on_checkpoint", 8, 1, second)]
    # on_fit_end is fit's, after the test split: train() alone does not call it.
    assert [e[:4] for e in rec.seen] == expected
    for _event, _step, _epoch, _names, ctx in rec.seen:
        assert ctx.model is kit.model and ctx.optimizer is kit.optimizer
        assert ctx.run_dir == kit.run.path
        assert ctx.val_loader is kit.trainer.val_loader
        assert set(ctx.loggers) == {"csv", "progress", "fake"}
        with pytest.raises(TypeError):
            ctx.metrics["x"] = 1.0  # read-only
    evals = [e[4] for e in rec.seen if e[0] == "on_eval_end"]
    assert evals[0].metrics["val/loss"] == pytest.approx(val4, rel=1e-5)
    assert evals[1].metrics["val/loss"] == pytest.approx(val8, rel=1e-5)
    # At on_step_end the last log point's figures are there too (log_every=1: this step's).
    step3 = next(e[4] for e in rec.seen if e[:2] == ("on_step_end", 3))
    assert "train/lr" in step3.metrics and step3.metrics["train/lr"] == pytest.approx(0.1 * 0.5**3)


class LogsScore:
    logs = ("val/score",)

    def on_eval_end(self, ctx):
        ctx.log("val/score", 10.0 * ctx.epoch + 1)


def test_ctx_log_reaches_metrics_csv_and_the_runs_metrics(tmp_path):
    kit = make_trainer(tmp_path / "run", callbacks=[LogsScore()])
    kit.trainer.train(resumed=False)
    assert _rows(kit, "score", split="val") == [(4, 1.0), (8, 11.0)]
    assert kit.loop.metrics["val/score"] == 11.0


@pytest.mark.parametrize(("every", "keep", "files"), [
    (3, 10, ["step-3.pt", "step-6.pt"]),
    (2, 2, ["step-6.pt", "step-8.pt"]),
    (5, 3, ["step-5.pt"]),
])  # fmt: skip
def test_step_checkpoints_at_every_steps_rotated_to_keep_last(tmp_path, every, keep, files):
    kit = make_trainer(tmp_path / "run", f"checkpoint.every_steps={every}",
                       f"checkpoint.keep_last={keep}")  # fmt: skip
    w0, b0 = _initial()
    kit.trainer.train(resumed=False)
    names = sorted(p.name for p in kit.run.checkpoints.iterdir() if p.name.startswith("step-"))
    assert names == sorted(files)
    for name in files:
        n = int(name[5:-3])
        state = load_checkpoint(kit.run.checkpoints / name)
        assert state["step"] == n
        w, b = sgd_by_hand(w0, b0, kit.data, n)
        np.testing.assert_allclose(state["model"]["weight"].numpy(), w, rtol=1e-5, atol=1e-6)
        # The rows it counts are the ones on disk when it was written (a resume keeps them):
        # up to this step's training rows; the evaluation at an epoch's end comes after.
        before = [r for r in read_rows(kit.run.metrics_path)
                  if r[0] < n or (r[0] == n and r[2] == "train")]  # fmt: skip
        assert state["log_rows"] == len(before)


def test_no_step_checkpoints_by_default_but_last_and_best(tmp_path):
    kit = make_trainer(tmp_path / "run")
    kit.trainer.train(resumed=False)
    assert {p.name for p in kit.run.checkpoints.iterdir()} <= {"best.pt", "last.pt"}
    last = load_checkpoint(kit.run.checkpoints / "last.pt")
    assert last["step"] == 8 and last["loop"]["epoch_done"] is True


def test_early_stopping_ends_the_run_when_the_monitor_stops_improving(tmp_path):
    # lr 0: the weights never move, so val/loss is the same every epoch; epoch 0 is the
    # first best, epoch 1 no better: patience 1 is used up after two epochs of five.
    kit = make_trainer(tmp_path / "run", "train.epochs=5", patience=1, factor=lambda s: 0.0)
    reason = kit.trainer.train(resumed=False)
    assert reason.startswith("early stop: no better val/loss in 1 evals")
    assert kit.loop.step == 8 and kit.loop.epoch == 1
    assert kit.loop.best["epoch"] == 0 and kit.loop.best["step"] == 4


def test_patience_is_not_spent_while_the_monitor_improves(tmp_path):
    # The first step's lr is 0.1, then 0.05, ...: SGD on MSE at such lrs lowers the val loss
    # only if the hand computation says so; the run stops early exactly when it does not.
    w0, b0 = _initial()
    val = samples(4, seed=1)
    losses = [mse(*sgd_by_hand(w0, b0, samples(), 4 * (e + 1)), val) for e in range(3)]
    kit = make_trainer(tmp_path / "run", "train.epochs=3", patience=1)
    reason = kit.trainer.train(resumed=False)
    stop_at = next((e for e in (1, 2) if not losses[e] < min(losses[:e])), None)
    assert kit.loop.epoch == (2 if stop_at is None else stop_at)
    assert reason.startswith("early stop") == (stop_at is not None)
    assert kit.loop.best["value"] == pytest.approx(min(losses[: kit.loop.epoch + 1]), rel=1e-5)


class StopAt:
    def __init__(self, step):
        self.step = step

    def on_step_end(self, ctx):
        if ctx.step >= self.step:
            ctx.request_stop()


@pytest.mark.parametrize("at", [1, 3, 6])
def test_a_callbacks_stop_request_ends_training_at_that_step(tmp_path, at):
    kit = make_trainer(tmp_path / "run", "train.epochs=3", callbacks=[StopAt(at)])
    reason = kit.trainer.train(resumed=False)
    assert reason == "stopped by callback StopAt"
    assert kit.loop.step == at
    # The epoch still ends: its evaluation and last.pt hold the stopped state.
    assert load_checkpoint(kit.run.checkpoints / "last.pt")["step"] == at
    assert _rows(kit, "loss", split="val")[-1][0] == at


@pytest.mark.parametrize(("max_steps", "epoch"), [(5, 1), (3, 0), (8, 1)])
def test_max_steps_ends_training_there(tmp_path, max_steps, epoch):
    kit = make_trainer(tmp_path / "run", "train.epochs=4", f"train.max_steps={max_steps}")
    reason = kit.trainer.train(resumed=False)
    assert reason == "max_steps"
    assert kit.loop.step == max_steps and kit.loop.epoch == epoch


def _nan_always(model, batch):
    x, y = batch
    return ((model(x) - y) ** 2).mean() * float("nan")


def test_a_nan_loss_that_stays_raises_diverged(tmp_path):
    kit = make_trainer(tmp_path / "run", step_fn=_nan_always, val=False)
    with pytest.raises(Diverged, match=r"the training loss became nan and stayed there "
                                       r"\(diverged by step 4\)"):  # fmt: skip
        kit.trainer.train(resumed=False)
    # The epoch's end wrote last.pt before judging: the run can be looked at.
    assert load_checkpoint(kit.run.checkpoints / "last.pt")["step"] == 4


def _nan_first_step(model, batch):
    x, y = batch
    loss = ((model(x) - y) ** 2).mean()
    # NaN in value only on the first batch; its gradient stays finite (0 * grad + constant).
    if _nan_first_step.calls == 0:
        loss = loss * 0 + float("nan")
    _nan_first_step.calls += 1
    return loss


def test_a_nan_loss_that_goes_away_is_not_divergence(tmp_path):
    _nan_first_step.calls = 0
    kit = make_trainer(tmp_path / "run", "train.epochs=1", step_fn=_nan_first_step, val=False)
    assert kit.trainer.train(resumed=False) == "epochs"
    losses = [v for _, v in _rows(kit, "loss")]
    assert np.isnan(losses[0]) and np.isfinite(losses[1:]).all()


def test_a_stop_signal_during_training_stops_at_the_next_step_boundary(tmp_path):
    calls = []

    def signal_at_second(model, batch):
        calls.append(1)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # the handler only sets a flag
        x, y = batch
        return ((model(x) - y) ** 2).mean()

    with GracefulStop() as stop:
        kit = make_trainer(tmp_path / "run", step_fn=signal_at_second, stop=stop)
        with pytest.raises(Interrupted) as info:
            kit.trainer.train(resumed=False)
    assert info.value.signum == signal.SIGTERM and not info.value.abort
    assert kit.loop.step == 2 and len(calls) == 2  # the step it arrived in was finished
    w0, b0 = _initial()
    w, _ = sgd_by_hand(w0, b0, kit.data, 2)
    np.testing.assert_allclose(kit.model.weight.detach().numpy(), w, rtol=1e-5, atol=1e-6)


def test_a_stop_requested_before_training_takes_no_step(tmp_path):
    stop = GracefulStop()
    stop.signum = signal.SIGINT  # as its handler leaves it
    kit = make_trainer(tmp_path / "run", stop=stop)
    w_before = kit.model.weight.detach().clone()
    with pytest.raises(Interrupted, match="SIGINT"):
        kit.trainer.train(resumed=False)
    assert kit.loop.step == 0 and torch.equal(kit.model.weight.detach(), w_before)


def test_a_resumed_trainer_starts_after_the_finished_epoch(tmp_path):
    kit = make_trainer(tmp_path / "run", "train.epochs=1")
    kit.trainer.train(resumed=False)
    state = load_checkpoint(kit.run.checkpoints / "last.pt")
    again = make_trainer(tmp_path / "again", "train.epochs=2")
    again.trainer.checkpointer.load_state_dict(state)
    assert again.trainer.train(resumed=True) == "epochs"
    assert again.loop.step == 8
    # Steps 1-4 are the first run's: the second logs 5-8 only.
    assert [s for s, _ in _rows(again, "loss")] == [5, 6, 7, 8]
    w0, b0 = _initial()
    w, _ = sgd_by_hand(w0, b0, kit.data, 8)
    np.testing.assert_allclose(again.model.weight.detach().numpy(), w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("part", ["clock", "loop", "callbacks"])
def test_an_assembly_whose_parts_are_not_wired_together_is_refused(tmp_path, part):
    """The stepper marks the loop's clock, the checkpointer saves the loop's state and
    callbacks: a second object of one of them is a wiring mistake, named at once."""
    from trainwell.engine.loop.assembly import Assembly
    from trainwell.engine.state.callbacks import Callbacks
    from trainwell.engine.state.loop_state import LoopState
    from trainwell.engine.step.anatomy import StepClock

    plan = kit.make_trainer(tmp_path / "run").trainer
    parts = plan.parts()
    assert "run" not in parts  # the Assembly's fields only, not the Trainer's additions
    parts[part] = {"clock": StepClock(kit.CPU), "loop": LoopState(kit.CPU),
                   "callbacks": Callbacks([])}[part]  # fmt: skip
    with pytest.raises(ValueError, match=f"not wired together: .*{part}"):
        Assembly(**parts)
    Assembly(**plan.parts())
