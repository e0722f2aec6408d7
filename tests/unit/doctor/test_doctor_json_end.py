"""An engine run's doctor.json holds the findings of the probes that judge the whole run
(they speak at its end, which came after doctor.json was written)."""

from __future__ import annotations

import json

MODELS = '''
import torch
from torch import nn


class WithUnusedHead(nn.Module):
    def __init__(self, num_classes: int, input_shape: tuple):
        super().__init__()
        width = int(torch.tensor(input_shape).prod())
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(width, 16), nn.ReLU(),
                                  nn.Linear(16, num_classes))
        self.aux = nn.Linear(16, 3)  # never called: its parameters never get a gradient

    def forward(self, x):
        return self.body(x)
'''


def test_end_of_run_findings_reach_doctor_json(cli, tmp_path):
    (tmp_path / "unused_models.py").write_text(MODELS)
    code, out, err = cli("train", "run.dir=run", "data.name=synthetic",
                         "data.kwargs.num_samples=256", "data.kwargs.shape=[8]",
                         "data.kwargs.num_classes=4", "data.batch_size=32",
                         "model.name=unused_models:WithUnusedHead", "train.epochs=2",
                         "train.precision=fp32")  # fmt: skip
    assert code == 0, err
    report = json.loads((tmp_path / "run" / "doctor.json").read_text())
    codes = [f["code"] for f in report["findings"]]
    assert "param-without-grad" in codes, (codes, out)
    # Spoken once: the `with doc` around the run ends it again, to no effect.
    assert out.count("param-without-grad") == 1
