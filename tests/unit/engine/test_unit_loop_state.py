"""LoopState on its own: counters, an epoch's start, the running sums, the round trip."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from trainwell.engine.state.loop_state import LoopState, restore_rng, rng_state

CPU = torch.device("cpu")


def _with_sums(step=7, start=5):
    s = LoopState(CPU)
    s.step, s.epoch, s.epoch_start_step = step, 2, start
    s.window.add({"loss": torch.tensor(2.0)}, 4)  # a sum of 8 over 4 samples
    s.epoch_sums.add({"loss": torch.tensor(1.0)}, 2)
    s.optim_window.add({"grad_norm": torch.tensor(3.0)}, 1)
    s.best = {"metric": "val/loss", "value": 0.25, "step": 4, "epoch": 1}
    s.metrics = {"val/loss": 0.25}
    s.amp_skipped += 2
    return s


def test_a_new_state_starts_at_zero():
    s = LoopState(CPU)
    assert (s.step, s.epoch, s.steps_into_epoch, s.epoch_done) == (0, 0, 0, False)
    assert s.window.empty and s.epoch_sums.empty and s.optim_window.empty
    assert s.best == {} and s.metrics == {} and int(s.amp_skipped) == 0


@pytest.mark.parametrize(("step", "start"), [(0, 0), (7, 5), (12, 12)])
def test_steps_into_epoch_counts_from_the_epochs_first_step(step, start):
    s = LoopState(CPU)
    s.step, s.epoch_start_step = step, start
    assert s.steps_into_epoch == step - start


def test_a_fresh_epoch_starts_its_sums_at_zero():
    s = _with_sums()
    s.epoch_done = True
    s.start_epoch(3, 0)
    assert (s.epoch, s.epoch_start_step, s.steps_into_epoch, s.epoch_done) == (3, 7, 0, False)
    assert s.window.empty and s.epoch_sums.empty and s.optim_window.empty
    # What the epoch's end left for the run stays.
    assert s.best["value"] == 0.25 and s.metrics == {"val/loss": 0.25}


@pytest.mark.parametrize("skip", [1, 2, 5])
def test_a_resumed_epoch_keeps_its_sums_and_its_start(skip):
    s = _with_sums()
    s.start_epoch(2, skip)
    assert s.epoch_start_step == 7 - skip and s.steps_into_epoch == skip
    assert s.window.means() == {"loss": 2.0} and s.epoch_sums.means() == {"loss": 1.0}
    assert s.optim_window.means() == {"grad_norm": 3.0}


def test_closing_a_window_adds_it_to_the_epoch_weighted_by_samples():
    s = _with_sums()
    s.close_window()
    assert s.window.empty
    # (1.0 * 2 + 2.0 * 4) / 6 samples
    assert s.epoch_sums.means()["loss"] == pytest.approx(10 / 6)


def test_state_dict_round_trip_restores_everything_into_a_fresh_state():
    s = _with_sums()
    s.epoch_done = True
    state = s.state_dict()
    fresh = LoopState(CPU)
    counter = fresh.amp_skipped
    fresh.load_state_dict(state)
    assert (fresh.step, fresh.epoch, fresh.epoch_start_step, fresh.epoch_done) == (7, 2, 5, True)
    assert fresh.window.means() == {"loss": 2.0}
    assert fresh.epoch_sums.means() == {"loss": 1.0}
    assert fresh.optim_window.means() == {"grad_norm": 3.0}
    assert fresh.best == s.best and fresh.metrics == s.metrics
    # In place: the stepper counts into the very tensor it was given.
    assert fresh.amp_skipped is counter and int(counter) == 2
    # Saved again, it says the same (the sums' own layout may differ: pending or folded).
    again = fresh.state_dict()
    sums = ("window", "epoch_sums", "optim_window")
    assert {k: v for k, v in again.items() if k not in sums} == {
        k: v for k, v in state.items() if k not in sums
    }


def test_the_state_is_a_copy_not_a_view():
    s = _with_sums()
    state = s.state_dict()
    s.best["value"] = 9.0
    s.metrics["val/loss"] = 9.0
    s.step += 1
    assert state["best"]["value"] == 0.25 and state["metrics"]["val/loss"] == 0.25
    assert state["step"] == 7
    fresh = LoopState(CPU)
    fresh.load_state_dict(state)
    state["best"]["value"] = 1.5
    assert fresh.best["value"] == 0.25


def test_the_state_holds_plain_values():
    state = _with_sums().state_dict()
    assert state["amp_skipped"] == 2 and type(state["amp_skipped"]) is int
    assert state["steps_into_epoch"] == 2


def test_an_older_state_without_the_optimizers_window_loads():
    state = _with_sums().state_dict()
    del state["optim_window"]
    del state["amp_skipped"]
    fresh = LoopState(CPU)
    fresh.optim_window.add({"grad_norm": torch.tensor(1.0)}, 1)
    fresh.load_state_dict(state)
    assert fresh.step == 7 and int(fresh.amp_skipped) == 0
    assert fresh.optim_window.means() == {"grad_norm": 1.0}  # untouched: nothing saved


def test_metrics_come_back_as_floats():
    state = _with_sums().state_dict()
    state["metrics"] = {"val/accuracy": 1, "val/loss": torch.tensor(0.5).item()}
    fresh = LoopState(CPU)
    fresh.load_state_dict(state)
    assert fresh.metrics == {"val/accuracy": 1.0, "val/loss": 0.5}
    assert all(type(v) is float for v in fresh.metrics.values())


def _draws():
    return (random.random(), random.gauss(0, 1), np.random.rand(), float(torch.rand(())))


@pytest.mark.parametrize("half_gauss", [False, True], ids=["no-gauss", "gauss-cached"])
def test_every_rng_continues_after_a_round_trip_through_a_file(tmp_path, half_gauss):
    random.seed(3), np.random.seed(3), torch.manual_seed(3)
    if half_gauss:  # Python's gauss caches its second value: the state must carry it
        random.gauss(0, 1), np.random.randn()
    state = rng_state()
    expected = _draws()
    torch.save(state, tmp_path / "rng.pt")
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    restore_rng(torch.load(tmp_path / "rng.pt", weights_only=True))
    assert _draws() == expected


def test_python_rng_is_one_tensor_not_625_ints():
    # Each int of a tuple is pickled on its own; the checkpoint's save pays for each one.
    py = rng_state()["python"]
    assert py["words"].dtype == torch.int64 and py["words"].shape == (625,)


def test_a_checkpoint_from_before_keeps_pythons_rng_as_the_tuple_and_still_restores():
    random.seed(11)
    old = rng_state() | {"python": random.getstate()}  # the format checkpoints had before
    expected = random.random()
    random.seed(0)
    restore_rng(old)
    assert random.random() == expected
