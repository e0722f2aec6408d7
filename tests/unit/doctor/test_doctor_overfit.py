"""``trainwell doctor --overfit`` judges only what it can: PASSED once the batch's loss
reaches the bound, FAILED when the loss stopped falling (or falls far too slowly), and
no verdict, with the steps it needs, for a correct script that ended while its loss
was still falling."""

from __future__ import annotations

import json

import pytest

from trainwell.cli import main
from trainwell.doctor.overfit import steps_needed

SCRIPT = """
import sys
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

steps, lr, mode = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
torch.manual_seed(0)
x, y = torch.randn(2048, 20), torch.randint(0, 10, (2048,))
loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 10))
if mode == "frozen":  # only the output layer's bias learns
    for p in list(model[0].parameters()) + [model[2].weight]:
        p.requires_grad_(False)
opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
step = 0
while step < steps:
    for xb, yb in loader:
        if mode == "shuffled":  # the labels lose their inputs at every step
            yb = yb[torch.randperm(len(yb))]
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        step += 1
        if step >= steps:
            break
"""


def overfit(tmp_path, capsys, *args):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    out = tmp_path / "f.json"
    assert main(["doctor", "--overfit", "--json", str(out), str(script), *map(str, args)]) == 0
    return json.loads(out.read_text())["overfit"], capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("steps", [8, 30, 58])
def test_a_correct_script_too_short_to_judge_gets_no_verdict_and_the_steps_it_needs(
    tmp_path, capsys, steps
):
    verdict, err = overfit(tmp_path, capsys, steps, 3e-3, "ok")
    assert verdict["passed"] is None and verdict["steps"] == steps
    assert steps < verdict["steps_needed"] <= 400
    assert "FAILED" not in err and "overfit check: no verdict" in err
    assert f"needs about {verdict['steps_needed']} steps" in err


@pytest.mark.slow
@pytest.mark.parametrize(("steps", "lr"), [(120, 3e-3), (300, 1e-3)])
def test_a_correct_script_long_enough_passes(tmp_path, capsys, steps, lr):
    verdict, err = overfit(tmp_path, capsys, steps, lr, "ok")
    assert verdict["passed"] is True and verdict["final_loss"] < 0.05 * verdict["initial_loss"]
    assert "overfit check: PASSED" in err


@pytest.mark.slow
@pytest.mark.parametrize(("steps", "lr", "mode"), [
    (58, 0.0, "ok"), (58, 3e-3, "shuffled"), (200, 3e-3, "shuffled"), (58, 3e-3, "frozen"),
    (200, 3e-3, "frozen"),
])  # fmt: skip
def test_what_cannot_fit_one_batch_fails_at_any_length(tmp_path, capsys, steps, lr, mode):
    verdict, err = overfit(tmp_path, capsys, steps, lr, mode)
    assert verdict["passed"] is False and verdict["steps"] == steps
    assert "overfit check: FAILED" in err


def test_steps_needed_from_the_rate_of_the_fall():
    assert steps_needed([1.0] * 30) is None  # flat: a verdict (FAILED)
    assert steps_needed([1.0 + 0.01 * i for i in range(30)]) is None  # rising
    assert steps_needed([1.0] * 5) == 20  # too few to tell flat from a slow start
    # About 0.1% a step: some 3000 steps to 5% of the start: far too slow, FAILED.
    assert steps_needed([2.3 * 0.999**i for i in range(100)]) is None
    assert 90 <= steps_needed([2.3 * 0.97**i for i in range(40)]) <= 110
