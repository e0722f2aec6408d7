"""Any task through a step function: batches of any shape, metrics, and their bad input."""

from __future__ import annotations

import csv
import dataclasses
from collections import namedtuple
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from rich.console import Console
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainwell
from tests import tasks_code
from tests.conftest import read_summary
from trainwell.config import load_config
from trainwell.data import check_labels
from trainwell.engine.loading.batch import describe, sample_count, to_device
from trainwell.engine.state.metrics import MetricSums
from trainwell.engine.step.step_fn import LossStep, StepError, unpack
from trainwell.errors import UserError

QUIET = Console(quiet=True)
BASE = ["train.precision=fp32", "doctor.enabled=false", "train.log_every=2"]


def fit(tmp_path: Path, *overrides: str, name: str = "run", **kw):
    cfg = load_config(overrides=[*BASE, f"run.dir={tmp_path / name}", *overrides])
    return trainwell.fit(cfg, console=QUIET, **kw)


def rows(run_dir: Path) -> list[dict]:
    with open(run_dir / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def series(run_dir: Path, split: str, name: str) -> list[float]:
    return [float(r["value"]) for r in rows(run_dir) if (r["split"], r["name"]) == (split, name)]


# ---- batches -------------------------------------------------------------------------------


@dataclasses.dataclass
class Pair:
    image: torch.Tensor
    tag: str


def test_to_device_keeps_every_structure_and_leaf():
    Point = namedtuple("Point", "x y")
    batch = {"a": [torch.ones(3, 2), (torch.zeros(3), "s")], "p": Point(torch.ones(3), 7),
             "d": Pair(torch.ones(3, 1), "t"), "none": None}  # fmt: skip
    moved = to_device(batch, torch.device("cpu"))
    assert isinstance(moved["p"], Point) and moved["p"].y == 7
    assert isinstance(moved["d"], Pair) and moved["d"].tag == "t"
    assert moved["a"][1][1] == "s" and moved["none"] is None
    assert torch.equal(moved["a"][0], torch.ones(3, 2))
    assert sample_count(batch) == 3 and sample_count({"id": "x"}) == 1
    assert describe(batch).startswith("{a: [list[2]") or "a:" in describe(batch)


def test_unpack_accepts_a_loss_or_a_mapping_and_refuses_the_rest():
    loss = torch.tensor(1.0, requires_grad=True)
    assert unpack(loss, 4)[2] == 4
    _, metrics, n = unpack({"loss": loss, "mae": torch.tensor(0.5), "batch_size": 9}, 4)
    assert sorted(metrics) == ["loss", "mae"] and n == 9
    for bad, match in [
        (None, "returned NoneType"),
        (1.5, "returned float"),
        ({"mae": torch.tensor(1.0)}, "without 'loss'"),
        ({"loss": torch.ones(3)}, r"'loss' has shape \(3,\)"),
        ({"loss": loss, "f1": 0.5}, "'f1' is a float, not a tensor"),
        ({"loss": loss, "acc": (torch.tensor(1), 2, 3)}, "pair"),
        ({"loss": torch.tensor(3)}, "floating point"),
    ]:
        with pytest.raises(StepError, match=match):
            unpack(bad, 4)


def test_metric_sums_weigh_by_samples_keep_ratios_exact_and_round_trip():
    sums = MetricSums(torch.device("cpu"), torch.float64)
    sums.add({"loss": torch.tensor(1.0), "acc": (torch.tensor(1), 3)}, n=3)
    sums.add({"loss": torch.tensor(4.0), "acc": (torch.tensor(2), torch.tensor(4))}, n=1)
    copy = MetricSums(torch.device("cpu"), torch.float64)
    copy.load_state_dict(sums.state_dict())
    assert sums.means() == copy.means() == {"acc": 3 / 7, "loss": 7 / 4}


@pytest.mark.slow
def test_ignore_index_targets_are_not_out_of_range():
    ds = TensorDataset(torch.zeros(4, 2), torch.tensor([0, 2, -100, 1]))
    check_labels(ds, 3, "train", ignore_index=-100)
    with pytest.raises(UserError, match="labels out of range"):
        check_labels(ds, 3, "train")


def test_loss_step_accuracy_skips_ignored_targets():
    out = LossStep(nn.CrossEntropyLoss(ignore_index=-1), accuracy=True)(
        nn.Identity(),
        (torch.tensor([[5.0, 0.0], [0.0, 5.0], [5.0, 0.0]]), torch.tensor([0, 0, -1])),
    )
    assert [int(v) for v in out["accuracy"]] == [1, 2]


# ---- tasks, end to end ---------------------------------------------------------------------


@pytest.mark.slow
def test_language_model_with_dict_batches_padding_and_perplexity(tmp_path):
    code = "tests.tasks_code"
    result = fit(tmp_path, f"data.name={code}:make_lm_data", f"data.collate={code}:pad",
                 f"model.name={code}:make_lm", f"train.step={code}:lm_step",
                 "data.batch_size=16", "train.epochs=6", "optim.lr=0.02")  # fmt: skip
    run = tmp_path / "run"
    ppl = series(run, "train", "ppl")
    assert ppl[-1] < 0.5 * ppl[0]
    assert result.metrics["val/token_acc"] > 0.5  # chance is 1/11
    assert result.metrics["val/ppl"] == pytest.approx(series(run, "val", "ppl")[-1])
    assert read_summary(run)["weights"].startswith("best.pt")


@pytest.mark.slow
def test_segmentation_targets_with_ignore_index_and_pixel_accuracy(tmp_path):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 1, 6, 6, generator=g)
    y = (x[:, 0] > 0).long()
    y[:, 0, :] = 255  # an unlabeled border row
    net = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 2, 1))
    result = fit(tmp_path, "data.batch_size=16", "train.epochs=8", "optim.lr=0.02",
                 "train.loss_kwargs={ignore_index: 255}", model=net,
                 train_data=TensorDataset(x[:48], y[:48]),
                 val_data=TensorDataset(x[48:], y[48:]))  # fmt: skip
    assert result.metrics["val/accuracy"] > 0.9


@pytest.mark.slow
def test_two_inputs_and_regression_metrics(tmp_path):
    train, val = tasks_code.make_two_inputs()
    result = fit(tmp_path, "data.batch_size=32", "train.epochs=5", "optim.lr=0.02",
                 model=tasks_code.TwoTowers(), train_data=train, val_data=val,
                 step_fn=tasks_code.two_input_step)  # fmt: skip
    assert result.metrics["val/acc"] > 0.85
    reg = fit(tmp_path, "data.name=tests.tasks_code:make_regression", "train.epochs=6",
              "model.name=tests.tasks_code:make_regressor", "data.batch_size=32", "optim.lr=0.01",
              "train.step=tests.tasks_code:regression_step", name="reg")  # fmt: skip
    mae = series(tmp_path / "reg", "train", "mae")
    assert mae[-1] < 0.5 * mae[0] and "val/mae" in reg.metrics


@pytest.mark.slow
def test_iterable_dataset_needs_max_steps_and_then_trains(tmp_path):
    args = ["data.name=tests.tasks_code:make_stream",
            "model.name=tests.tasks_code:make_regressor",
            "train.loss=mse", "data.batch_size=20", "train.epochs=3"]  # fmt: skip
    with pytest.raises(UserError, match="train.max_steps"):
        fit(tmp_path, *args, name="nolen")
    result = fit(tmp_path, *args, "train.max_steps=25")
    summary = read_summary(tmp_path / "run")
    # 10 steps per pass of 200 samples; the third epoch stops at step 25.
    assert summary["steps"] == 25 and summary["steps_per_epoch"] is None
    assert "val/loss" in result.metrics


@pytest.mark.slow
def test_a_users_dataloader_is_used_as_it_is(tmp_path):
    ds = tasks_code.make_regression(96)
    seen = []

    def step(model, batch):
        seen.append(batch[0].shape[0])
        return F.mse_loss(model(batch[0]), batch[1])

    loader = DataLoader(ds, batch_size=12, shuffle=False)
    fit(tmp_path, "train.epochs=1", model=tasks_code.make_regressor(), train_data=loader,
        step_fn=step)  # fmt: skip
    assert seen[-8:] == [12] * 8  # 96 / 12 batches, the loader's own size


@pytest.mark.slow
def test_default_step_accepts_an_ignore_index_loss_and_refuses_other_shapes(tmp_path):
    x, y = torch.randn(64, 4), torch.randint(0, 3, (64,))
    y[::5] = -100
    fit(tmp_path, "train.epochs=1", "data.batch_size=16", model=nn.Linear(4, 3),
        train_data=TensorDataset(x, y), loss_fn=nn.CrossEntropyLoss(ignore_index=-100))  # fmt: skip
    three = TensorDataset(x, y, torch.arange(64))
    with pytest.raises(UserError, match="batches are 3 elements.*step function"):
        fit(tmp_path, "train.epochs=1", model=nn.Linear(4, 3), train_data=three, name="three")


@pytest.mark.slow
def test_regression_outputs_that_broadcast_are_refused_before_training(tmp_path):
    x, y = torch.randn(64, 4), torch.randn(64)
    shapes = r"outputs \(N, 1\) but the targets are \(N,\).*\(N, N\).*squeeze"
    with pytest.raises(UserError, match=shapes):
        fit(tmp_path, "train.loss=mse", model=nn.Linear(4, 1), train_data=TensorDataset(x, y))
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    "step, match",
    [
        (lambda m, b: None, "train.step returned NoneType"),
        (lambda m, b: {"acc": m(b[0]).mean()}, "without 'loss'"),
        (lambda m, b: F.mse_loss(m(b[0]), b[1], reduction="none"), "'loss' has shape"),
        (lambda m, b: m(b[0]).mean().detach(), "does not depend on any trainable parameter"),
        (lambda m, b: {"loss": m(b[0]).mean(), "f1": m(b[0])}, "'f1' has shape"),
    ],
)
def test_a_bad_step_is_refused_before_training(tmp_path, step, match):
    ds = tasks_code.make_regression(64)
    with pytest.raises(StepError, match=match):
        fit(tmp_path, model=tasks_code.make_regressor(), train_data=ds, step_fn=step)
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_model_holds_the_best_weights_without_a_test_split(tmp_path):
    result = fit(tmp_path, "data.name=tests.tasks_code:make_regression", "train.epochs=3",
                 "model.name=tests.tasks_code:make_regressor", "train.loss=mse",
                 "data.batch_size=32")  # fmt: skip
    best = torch.load(tmp_path / "run" / "checkpoints" / "best.pt", weights_only=True)["model"]
    for name, tensor in result.model.state_dict().items():
        assert torch.equal(tensor, best[name]), name
    assert result.summary["weights"] == f"best.pt (step {result.summary['best']['step']})"


@pytest.mark.slow
def test_run_directory_named_after_the_objects_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = load_config(overrides=[*BASE, "train.epochs=1"])
    result = trainwell.fit(cfg, model=tasks_code.make_regressor(), console=QUIET,
                           train_data=tasks_code.make_regression(64),
                           loss_fn=nn.MSELoss())  # fmt: skip
    assert result.run_dir.name.endswith("-TensorDataset-Sequential")


@pytest.mark.slow
def test_optimizer_and_scheduler_by_import_path_resume_from_their_state(tmp_path):
    args = ["data.name=tests.tasks_code:make_regression",
            "model.name=tests.tasks_code:make_regressor",
            "train.loss=mse", "data.batch_size=32", "train.epochs=2",
            "optim.name=torch.optim:RMSprop", "optim.kwargs={alpha: 0.9}",
            "sched.name=torch.optim.lr_scheduler:OneCycleLR", "sched.kwargs={max_lr: 0.05}",
            "checkpoint.every_steps=5"]  # fmt: skip
    full = fit(tmp_path, *args, name="full")
    state = torch.load(tmp_path / "full/checkpoints/step-5.pt", weights_only=True)
    assert state["scheduler"]["total_steps"] == 14 and "alpha" in str(state["optimizer"])
    again = fit(tmp_path, *args, name="again", resume=tmp_path / "full/checkpoints/step-5.pt")
    assert again.metrics == full.metrics
    for name, tensor in full.model.state_dict().items():
        assert torch.equal(tensor, again.model.state_dict()[name]), name


def _acc_step(model, batch):
    x, y = batch
    logits = model(x)
    return {"loss": F.cross_entropy(logits, y), "accuracy": (logits.argmax(1) == y).float().mean()}


@pytest.mark.slow
def test_a_user_step_logging_accuracy_is_monitored_by_it_and_a_typo_is_refused(tmp_path):
    x, y = torch.randn(128, 4), torch.randint(0, 3, (128,))
    kw = dict(model=nn.Linear(4, 3), train_data=TensorDataset(x, y),
              val_data=TensorDataset(x, y), step_fn=_acc_step)  # fmt: skip
    result = fit(tmp_path, "train.epochs=2", "data.batch_size=32", name="auto", **kw)
    assert result.summary["monitor"] == "val/accuracy"
    typo = r"early_stop.monitor: 'val/acuracy' is not a metric.*val/accuracy"
    with pytest.raises(UserError, match=typo):
        fit(tmp_path, "train.epochs=2", "data.batch_size=32", "early_stop.monitor=val/acuracy",
            name="typo", **kw)  # fmt: skip
