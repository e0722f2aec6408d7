"""The doctor's part-2 probes beyond the corpus: the rules on recorded series, the NaN
replay leaving the run untouched, the overfit check, and the engine staying silent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

import trainwell
from trainwell.cli import main
from trainwell.doctor.probes.amp_overflow import overflowing
from trainwell.doctor.probes.loss_not_decreasing import not_decreasing


def test_grad_scaler_history_rules():
    settle = [(65536.0 / 2**k, 65536.0 / 2 ** (k + 1)) for k in range(6)]  # finds its scale
    steady = [(1024.0, 1024.0)] * 200
    growth = [(1024.0, 2048.0), (2048.0, 1024.0)]  # grows after 2000 steps, backs off once
    assert not overflowing(settle + steady)
    assert not overflowing(settle + steady + growth + steady)
    # a third of the steps skipped after the scale settled
    skipping = settle + [(1024.0, 1024.0), (1024.0, 1024.0), (1024.0, 512.0)] * 20
    assert overflowing(skipping)
    assert not overflowing(skipping[:20])  # too few updates to judge a share
    # the scale collapsing below 1: gradients overflow fp16 even unscaled
    assert overflowing([(65536.0 / 2**k, 65536.0 / 2 ** (k + 1)) for k in range(17)])
    assert not overflowing([(65536.0 / 2**k, 65536.0 / 2 ** (k + 1)) for k in range(15)])


def test_loss_curve_rules():
    assert not_decreasing([0.693 + 0.01 * (-1) ** i for i in range(200)])  # noise around ln 2
    assert not not_decreasing([2.3 * 0.99**i for i in range(200)])
    assert not not_decreasing([0.693] * 50)  # too short to say
    assert not not_decreasing([2.3 * 0.5**i for i in range(20)] + [1e-6] * 180)  # converged
    assert not_decreasing([1.0 + 0.001 * i for i in range(150)])  # rising


class BNNet(nn.Module):
    """Dropout and batch norm (RNG and buffers a replay must not disturb); NaN from a log
    once the scale parameter is pushed to zero."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 16)
        self.bn = nn.BatchNorm1d(16)
        self.drop = nn.Dropout(0.3)
        self.out = nn.Linear(16, 3)

    def forward(self, x):
        h = self.drop(torch.relu(self.bn(self.fc(x))))
        h = torch.log(h.abs().sum(1, keepdim=True) * self.scale) + h  # the origin
        return self.out(h)


def train_bn(watch: bool):
    torch.manual_seed(0)
    model = BNNet()
    model.register_buffer("scale", torch.ones(1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(64, 6), torch.randint(0, 3, (64,))
    losses = []
    ctx = trainwell.doctor.watch() if watch else _Null()
    with ctx as doc:
        for step in range(8):
            if step == 5:
                model.scale.zero_()  # log(0) from here on
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return doc, model, losses, torch.rand(3)


class _Null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return None


def test_nonfinite_loss_is_traced_to_its_operation_and_the_run_is_unchanged():
    doc, model, losses, after = train_bn(watch=True)
    _, plain, plain_losses, plain_after = train_bn(watch=False)
    [finding] = doc.findings
    source = Path(__file__).read_text().splitlines()
    assert finding.code == "nonfinite-loss"
    assert source[finding.line - 1].strip().endswith("# the origin")
    assert finding.evidence["op"] == "log" and finding.evidence["step"] == 6
    # The replay restored the RNG (dropout) and the batch-norm statistics.
    assert str(losses) == str(plain_losses)
    assert torch.equal(after, plain_after)
    torch.testing.assert_close(model.bn.running_mean, plain.bn.running_mean, rtol=0, atol=0,
                               equal_nan=True)  # fmt: skip
    assert model.bn.num_batches_tracked == plain.bn.num_batches_tracked


def test_nonfinite_grad_is_not_reported_under_a_grad_scaler():
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**100)  # overflows its first steps
    with trainwell.doctor.watch() as doc:
        for _ in range(30):
            opt.zero_grad()
            loss = model(torch.randn(8, 4)).pow(2).mean()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
    assert [f.code for f in doc.findings] == []


@pytest.mark.slow
def test_overfit_check_passes_on_random_labels_and_fails_when_nothing_can_learn(
    tmp_path, capsys
):
    script = tmp_path / "train.py"
    script.write_text(
        "import sys, torch\n"
        "from torch import nn\n"
        "from torch.utils.data import DataLoader, TensorDataset\n"
        "torch.manual_seed(0)\n"
        "x, y = torch.randn(512, 10), torch.randint(0, 3, (512,))  # labels are noise\n"
        "loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)\n"
        "model = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 3))\n"
        "opt = torch.optim.Adam(model.parameters(), lr=float(sys.argv[1]))\n"
        "for epoch in range(8):\n"
        "    for xb, yb in loader:\n"
        "        opt.zero_grad()\n"
        "        nn.functional.cross_entropy(model(xb), yb).backward()\n"
        "        opt.step()\n"
    )
    out = tmp_path / "f.json"
    assert main(["doctor", "--overfit", "--json", str(out), str(script), "1e-2"]) == 0
    verdict = json.loads(out.read_text())["overfit"]
    assert verdict["passed"] is True and verdict["final_loss"] < 0.05
    assert "overfit check: PASSED" in capsys.readouterr().err
    assert main(["doctor", "--overfit", "--json", str(out), str(script), "0"]) == 0
    verdict = json.loads(out.read_text())["overfit"]
    assert verdict["passed"] is False and verdict["steps"] == 128
    assert "overfit check: FAILED" in capsys.readouterr().err


@pytest.mark.slow
def test_overfit_check_without_a_dataloader_says_it_has_no_verdict(tmp_path, capsys):
    script = tmp_path / "s.py"
    script.write_text("print('no training here')\n")
    assert main(["doctor", "--overfit", str(script)]) == 0
    assert "overfit check: no verdict" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_the_engine_is_silent_with_every_probe_on(cli, tmp_path, precision):
    from tests.conftest import SYNTHETIC

    code, _, err = cli("train", *SYNTHETIC, "train.epochs=2", f"train.precision={precision}",
                       "sched.warmup_steps=5", "run.dir=run")  # fmt: skip
    assert code == 0, err
    report = json.loads((tmp_path / "run" / "doctor.json").read_text())
    assert report["findings"] == [] and report["errors"] == []


@pytest.mark.slow
def test_a_bad_label_in_a_batch_the_sampled_check_skips_is_explained_at_the_crash(
    tmp_path, capsys
):
    script = tmp_path / "late.py"
    script.write_text(
        "import torch\n"
        "import torch.nn.functional as F\n"
        "model = torch.nn.Linear(4, 3)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for i in range(100):\n"
        "    y = torch.randint(0, 3, (8,))\n"
        "    if i == 90:  # after the first 64 calls the probe has looked at\n"
        "        y[0] = 3\n"
        "    opt.zero_grad()\n"
        "    loss = F.cross_entropy(model(torch.randn(8, 4)), y)\n"
        "    loss.backward()\n"
        "    opt.step()\n"
    )
    out = tmp_path / "f.json"
    assert main(["doctor", "--json", str(out), str(script)]) == 1
    findings = json.loads(out.read_text())["findings"]
    assert [(f["code"], f["line"]) for f in findings] == [("label-out-of-range", 10)]
    assert "Target 3 is out of bounds" in findings[0]["message"]


@pytest.mark.slow
def test_the_nan_replay_does_not_change_what_the_script_prints(capsys):
    """A model drawing from Python's RNG (layerdrop): the replay puts every RNG back."""
    import runpy
    import sys

    script = Path(__file__).resolve().parents[2] / "doctor_corpus" / "nan_layerdrop_log_variance.py"
    saved = sys.argv
    sys.argv = [str(script)]
    try:
        runpy.run_path(str(script), run_name="__main__")
    finally:
        sys.argv = saved
    plain = capsys.readouterr().out
    assert main(["doctor", str(script)]) == 0
    assert capsys.readouterr().out == plain and plain
