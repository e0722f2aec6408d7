"""Fine-tuning in real processes: a SIGTERM after an unfreeze (with a group added) and
``--resume auto``; the doctor on a hand-written script that unfreezes a part outside its
optimizer."""

from __future__ import annotations

import pytest

from tests.conftest import SYNTHETIC, model_csv, run_subprocess
from tests.unit.engine.test_optim_groups import assert_same
from trainwell.engine.checkpointing.checkpoint import load_checkpoint

KILL_MODULE = '''
import os, signal
import torch
from torch import nn


def model(num_classes, input_shape, hidden=(16,)):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(input_shape[0], hidden[0]), nn.ReLU(), nn.Dropout(0.1),
                        nn.Linear(hidden[0], num_classes))
    net[0].requires_grad_(False)
    return net


class UnfreezeThenStop:
    """Unfreezes layer 0 at epoch 1 (added as its own group); with TW_STOP_AT set, sends
    this process SIGTERM at that step, as a scheduler preempting the job would."""

    def __init__(self):
        self.done, self.stopped = False, False

    def on_step_end(self, ctx):
        if ctx.epoch >= 1 and not self.done:
            self.done = True
            ctx.model[0].requires_grad_(True)
            ctx.optimizer.add_param_group({"params": ctx.model[0].parameters(), "lr": 1e-3,
                                           "name": "first"})
        stop_at = int(os.environ.get("TW_STOP_AT", "0"))
        if stop_at and ctx.step == stop_at and not self.stopped:
            self.stopped = True
            os.kill(os.getpid(), signal.SIGTERM)

    def state_dict(self):
        return {"done": self.done, "stopped": self.stopped}

    def load_state_dict(self, state):
        self.done, self.stopped = state["done"], state["stopped"]
'''


@pytest.mark.slow
def test_sigterm_after_an_unfreeze_then_resume_auto_matches_the_uninterrupted_run(
    tmp_path, monkeypatch
):
    (tmp_path / "killmod.py").write_text(KILL_MODULE)
    args = [*SYNTHETIC, "model.name=killmod:model", "callbacks=[killmod:UnfreezeThenStop]",
            "train.epochs=3", "train.precision=fp32", "sched.warmup_steps=4",
            "optim.groups=[{params: '3.*', lr_scale: 2, name: head}]"]  # fmt: skip
    full = run_subprocess(["train", *args, f"run.dir={tmp_path / 'full'}"], tmp_path)
    assert full.returncode == 0, full.stderr[-2000:]
    # 14 steps per epoch: the stop comes 5 steps after the unfreeze.
    monkeypatch.setenv("TW_STOP_AT", "19")
    cut = run_subprocess(["train", *args, f"run.dir={tmp_path / 'cut'}"], tmp_path)
    monkeypatch.delenv("TW_STOP_AT")
    assert "interrupted at step 19" in cut.stdout, cut.stdout[-2000:] + cut.stderr[-2000:]
    again = run_subprocess(["train", *args, f"run.dir={tmp_path / 'cut'}", "--resume", "auto"],
                           tmp_path)  # fmt: skip
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resuming from" in again.stdout
    a = load_checkpoint(tmp_path / "full" / "checkpoints" / "last.pt")
    b = load_checkpoint(tmp_path / "cut" / "checkpoints" / "last.pt")
    assert_same(a["model"], b["model"])
    assert a["optim_layout"] == b["optim_layout"] and a["optim_layout"][-1]["params"] == [
        "0.weight", "0.bias"]  # fmt: skip
    assert model_csv(tmp_path / "full" / "metrics.csv") == model_csv(
        tmp_path / "cut" / "metrics.csv")  # fmt: skip


HAND_WRITTEN = """
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
model[0].requires_grad_(False)
opt = torch.optim.SGD(PARAMS, lr=0.1)
x = torch.randn(320, 8)
loader = DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=32, shuffle=True)
for epoch in range(4):
    if epoch == 2:
        model[0].requires_grad_(True)
    for xb, yb in loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("params", "found"),
    [("[p for p in model.parameters() if p.requires_grad]", True),
     ("model.parameters()", False)],
)  # fmt: skip
def test_doctor_on_a_hand_written_unfreeze(tmp_path, params, found):
    (tmp_path / "train.py").write_text(HAND_WRITTEN.replace("PARAMS", params))
    proc = run_subprocess(["doctor", "--json", "out.json", "train.py"], tmp_path)
    report = (tmp_path / "out.json").read_text()
    assert ("param-not-in-optimizer" in report) is found, proc.stdout
    if found:
        assert '"line": 9' in report and "unfrozen after it was built" in report
