"""doctor.overfit_batch=true: can the model drive the loss of one batch to near zero?"""

from __future__ import annotations

import csv
import math

import pytest
import torch
from rich.console import Console
from torch.utils.data import Dataset

import trainwell
from tests.conftest import SYNTHETIC, read_summary
from trainwell.config import load_config
from trainwell.engine.tools.overfit import OverfitResult

CAPABLE = [*SYNTHETIC, "model.kwargs.hidden=[64]", "doctor.overfit_batch=true", "run.dir=run"]
# Short checks want a brisk lr: at the default 3e-3 a batch takes some 200 steps.
BRISK = ["optim.lr=0.03", "train.max_steps=60"]


@pytest.mark.slow
def test_a_capable_model_passes(cli, tmp_path):
    code, out, err = cli("train", *CAPABLE, *BRISK)
    assert code == 0, err
    verdict = [line for line in out.splitlines() if line.startswith("overfit check:")]
    assert len(verdict) == 1 and verdict[0].startswith("overfit check: PASSED"), out
    assert "in 60 steps" in verdict[0] and "look at the data" in verdict[0]
    run = tmp_path / "run"
    summary = read_summary(run)
    assert summary["status"] == "completed"
    result = summary["overfit"]
    assert result["passed"] is True and result["steps"] == summary["steps"] == 60
    # Measured before any update: a fresh 4-class classifier starts near ln 4.
    assert abs(result["initial_loss"] - math.log(4)) < 0.3
    assert result["final_loss"] < 0.05 * result["initial_loss"]
    assert (run / "config.yaml").is_file() and (run / "curves.png").is_file()
    assert not list(run.rglob("*.pt")), "the check writes no checkpoint"
    with open(run / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r["name"] == "loss"]
    assert {r["split"] for r in rows} == {"train"}, "no validation"
    assert float(rows[0]["value"]) == pytest.approx(result["initial_loss"])


@pytest.mark.slow
def test_a_model_that_cannot_learn_fails(cli, tmp_path):
    # optim.lr must be positive; 1e-9 moves nothing in the default 200 steps.
    code, out, err = cli("train", *CAPABLE, "optim.lr=1e-9")
    assert code == 1, err
    assert "overfit check: FAILED" in out and "check the loss wiring" in out
    summary = read_summary(tmp_path / "run")
    assert summary["status"] == "completed"
    result = summary["overfit"]
    assert result["passed"] is False and result["steps"] == 200
    assert result["ratio"] > 0.9


class Counting(Dataset):
    """Synthetic samples that remember which indices were read."""

    def __init__(self, n: int = 256) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 8, generator=g)
        self.y = (self.x[:, 0] > 0).long() + 2 * (self.x[:, 1] > 0).long()
        self.read: list[int] = []

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        self.read.append(int(i))
        return self.x[i], self.y[i]


@pytest.mark.slow
def test_one_fixed_batch_through_the_python_api(tmp_path):
    data = Counting()
    cfg = load_config(overrides=["doctor.overfit_batch=true", *BRISK, "data.batch_size=16",
                                 "data.num_classes=4", f"run.dir={tmp_path / 'run'}"])  # fmt: skip
    model = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    result = trainwell.fit(cfg, model=model, train_data=data, console=Console(quiet=True))
    assert result.summary["overfit"]["passed"] is True
    assert result.metrics["overfit/final_loss"] == result.summary["overfit"]["final_loss"]
    # Set-up reads three samples (the input shape, the pre-flight forward) and 16 spread
    # over the data set (that they collate), then comes one batch of 16, read once and
    # trained on 60 times.
    assert len(data.read) == 3 + 16 + 16 and len(set(data.read[-16:])) == 16, data.read


def test_resume_is_refused(cli):
    code, _out, err = cli("train", *CAPABLE, "--resume", "auto")
    assert code == 2
    assert err.strip().splitlines() == [
        "trainwell: error: doctor.overfit_batch=true is a fresh check; it does not resume a run"
    ]


@pytest.mark.parametrize(
    ("initial", "final", "passed"),
    [
        (2.3, 0.1, True),  # below 5% of the start
        (2.3, 0.12, False),  # 5.2% of the start, and above 0.05
        (0.04, 0.039, True),  # a loss that starts small: below 0.05 outright
        (2.3, math.nan, False),
        (math.inf, 0.5, False),
    ],
)
def test_the_pass_criterion(initial, final, passed):
    assert OverfitResult(initial, final, steps=200).passed is passed
