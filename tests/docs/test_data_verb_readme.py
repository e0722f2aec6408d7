"""The docs' "Look at the data" examples (docs/engine/look-at-the-data.md) run as written
(in this process, through the command's entry point: tests/docs/test_readme.py).

The blocks are held here as the page shows them; ``test_the_docs_show_these_blocks`` keeps
the two the same."""

from __future__ import annotations

import json
import re
import shlex

import pytest

from tests.docs.test_readme import trainwell
from tests.docs_pages import page

COMMANDS = """\
trainwell data
trainwell data --out look --json look/data.json
trainwell data data.name=synthetic data.kwargs.num_samples=50000 --max-samples 2000
"""

MYDATA = """\
# mydata.py
import torch
from torch.utils.data import TensorDataset


def shaky():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(600, 8, generator=g), torch.randint(0, 3, (600,), generator=g)
    y[:300] = 0                          # most samples are class 0
    x[[5, 17, 40], 3] = float("nan")     # three broken rows
    val_x, val_y = torch.randn(100, 8, generator=g), torch.randint(0, 2, (100,), generator=g)
    return TensorDataset(x, y), TensorDataset(val_x, val_y)   # class 2 never in val
"""

USER_COMMANDS = """\
trainwell data data.name=mydata:shaky
trainwell train --dry-run data.name=mydata:shaky model.name=mlp
"""

WARNINGS = """\
warnings (4):
  - train: 66% of samples are class 0
  - val: 57% of samples are class 0
  - val: class 2 never appears (train has 106)
  - train: 3 inputs contain NaN
"""


def run_lines(block: str, cwd) -> list[str]:
    outputs = []
    for line in block.splitlines():
        args = shlex.split(line)
        assert args[0] == "trainwell"
        proc = trainwell(args[1:], cwd)
        assert proc.returncode == 0, f"{line}\n{proc.stderr[-2000:]}"
        outputs.append(proc.stdout)
    return outputs


@pytest.mark.slow
def test_the_commands_run_as_written(tmp_path):
    plain, looked, sampled = run_lines(COMMANDS, tmp_path)
    assert "data digits: 3 splits" in plain and "no warnings" in plain
    report = json.loads((tmp_path / "look" / "data.json").read_text())
    assert report["splits"]["train"]["size"] == 1257 and report["warnings"] == []
    assert sorted(p.name for p in (tmp_path / "look").glob("*.png")) == [
        "samples_test.png", "samples_train.png", "samples_val.png"]  # fmt: skip
    assert "wrote look/samples_train.png" in looked
    assert "statistics over 2000 drawn evenly" in sampled


@pytest.mark.slow
def test_the_user_data_example_prints_its_warnings(tmp_path):
    (tmp_path / "mydata.py").write_text(MYDATA)
    report, dry = run_lines(USER_COMMANDS, tmp_path)
    assert WARNINGS in report
    line = next(s.strip() for s in dry.splitlines() if s.strip().startswith("data: "))
    assert line.startswith("data: train 600 / val 100, 3 classes, imbalanced")
    assert "warning: train: 66% of samples are class 0 (+3 more: trainwell data)" in line
    assert "modules" in dry


def test_the_docs_show_these_blocks():
    text = page("engine/look-at-the-data.md")
    assert text.startswith("# Look at the data")
    blocks = [body for _, body in re.findall(r"```(\w+)\n(.*?)```", text, flags=re.S)]
    for expected in (COMMANDS, MYDATA, USER_COMMANDS):
        assert expected in blocks, f"README lacks, as written:\n{expected}"
    assert WARNINGS in text
