"""``trainwell train --dry-run``: the data's one-line summary and the per-module table
(type, output shape from the dry step's forward, parameters, trainable or frozen)."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

from tests.unit.data.test_data_verb import IMBALANCED, user_module
from trainwell.data.digits import load_digits_splits
from trainwell.engine.tools.module_table import ModuleOutputs
from trainwell.models import ModelConfig, build_model


def table_rows(out: str) -> dict[str, list[str]]:
    """The module table's rows by module name: the columns split on runs of 2+ spaces."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "modules")
    rows = {}
    for line in lines[start + 2:]:
        if not line.startswith("    ") or line.strip().startswith("..."):
            break
        cells = re.split(r"\s{2,}", line.strip())
        rows[cells[0]] = cells[1:]
    return rows


@pytest.mark.slow
def test_default_dry_run_prints_the_data_line_and_the_table(cli):
    code, out, err = cli("train", "--dry-run", "train.precision=fp32")
    assert code == 0, err
    x, y = load_digits_splits()[0].tensors
    line = next(s.strip() for s in out.splitlines() if s.strip().startswith("data: "))
    assert line.startswith("data: train 1257 / val 270 / test 270, 10 classes, balanced; "
                           "inputs (1, 8, 8) = 64 float32 in [")  # fmt: skip
    lo, hi = re.search(r"in \[(\S+), (\S+)\]", line).groups()
    assert float(lo) == pytest.approx(float(x.min()), rel=1e-3)
    assert float(hi) == pytest.approx(float(x.max()), rel=1e-3)
    rows = table_rows(out)
    net = build_model(ModelConfig(), 10, (1, 8, 8))
    assert list(rows) == [name for name, _ in net.named_children()]
    for name, module in net.named_children():
        kind, shape, params, state = rows[name]
        n = sum(p.numel() for p in module.parameters())
        assert kind == type(module).__name__ and int(params.replace(",", "")) == n
        assert state == ("trainable" if n else "-")
    # output shapes from the real forward of the 64-sample batch
    assert rows["0"][1] == "(64, 32, 8, 8) float32" and rows["12"][1] == "(64, 10) float32"
    assert rows["8"][1] == "(64, 256) float32"


MODELS = """
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.fc = nn.Linear(width, width)
        def forward(self, x):
            return torch.relu(self.fc(x)) + x

    class Tower(nn.Module):
        def __init__(self, num_classes=4, input_shape=(8,), depth=5, frozen=2):
            super().__init__()
            self.embed = nn.Linear(input_shape[0], 16)
            self.blocks = nn.ModuleList(Block(16) for _ in range(depth))
            self.unused = nn.Linear(3, 3)
            self.head = nn.Linear(16, num_classes)
            for block in self.blocks[:frozen]:
                block.requires_grad_(False)
            self.embed.bias.requires_grad_(False)
        def forward(self, x):
            x = self.embed(x)
            for block in self.blocks:
                x = block(x)
            return self.head(x)

    class Wrapped(nn.Module):  # one wrapper around the real network
        def __init__(self, num_classes=4, input_shape=(8,)):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(input_shape[0], 32), nn.Tanh(),
                                     nn.Linear(32, num_classes))
        def forward(self, x):
            return self.net(x)
"""

SYNTH = ["data.name=synthetic", "data.kwargs.num_samples=200", "data.kwargs.shape=[8]",
         "data.kwargs.num_classes=4", "data.batch_size=20", "train.precision=fp32"]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("depth,frozen", [(5, 2), (3, 0), (4, 4)])
def test_identical_blocks_fold_and_frozen_ones_say_so(cli, tmp_path, depth, frozen):
    mod = user_module(tmp_path, MODELS)
    kwargs = [f"model.kwargs.depth={depth}", f"model.kwargs.frozen={frozen}"]
    code, out, err = cli("train", "--dry-run", *SYNTH, f"model.name={mod}:Tower", *kwargs)
    assert code == 0, err
    rows = table_rows(out)
    assert rows["embed"] == ["Linear", "(20, 16) float32", "144", "partly frozen (128 trainable)"]
    runs = {"frozen": frozen, "trainable": depth - frozen}
    first = 0
    for state in ("frozen", "trainable"):
        count = runs[state]
        if not count:
            continue
        last = first + count - 1
        name = f"blocks.{first}" if count == 1 else f"blocks.{first}-{last} (x{count})"
        assert rows[name] == ["Block", "(20, 16) float32", "272", state], rows
        first = last + 1
    assert rows["unused"] == ["Linear", "not called", "12", "trainable"]
    assert rows["head"] == ["Linear", "(20, 4) float32", "68", "trainable"]


@pytest.mark.slow
def test_a_wrapper_shows_the_network_inside(cli, tmp_path):
    mod = user_module(tmp_path, MODELS)
    code, out, err = cli("train", "--dry-run", *SYNTH, f"model.name={mod}:Wrapped")
    assert code == 0, err
    assert list(table_rows(out)) == ["net.0", "net.1", "net.2"]


@pytest.mark.slow
def test_the_data_line_carries_the_first_warning(cli, tmp_path):
    mod = user_module(tmp_path, IMBALANCED)
    code, out, err = cli("train", "--dry-run", f"data.name={mod}:tensors", "data.kwargs.share=0.9",
                         "model.name=mlp", "train.precision=fp32")  # fmt: skip
    assert code == 0, err
    line = next(s.strip() for s in out.splitlines() if s.strip().startswith("data: "))
    assert "imbalanced" in line and "% of samples are class 0" in line
    assert re.search(r"warning: train: \d+% of samples are class 0", line), line


def test_module_outputs_directly():
    shared = nn.Linear(4, 4)

    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = shared, nn.LSTM(4, 6, batch_first=True)
        def forward(self, x):
            out, _ = self.b(self.a(self.a(x)))
            return out

    net = Twice()
    with ModuleOutputs(net) as table:
        net(torch.zeros(2, 3, 4))
    lines = table.lines()
    assert lines[0].split() == ["module", "type", "output", "params", "state"]
    assert "(2, 3, 4) float32 (2 calls)" in lines[1]
    assert "((2, 3, 6) float32, ((1, 2, 6) float32, (1, 2, 6) float32))" in lines[2]
    assert not net.a._forward_hooks and not net.b._forward_hooks  # hooks are removed


def test_a_long_model_is_cut_with_a_count():
    # Alternating widths: no two neighbours are the same, so nothing folds.
    layers = [nn.Linear(4, 4) if i % 2 else nn.Tanh() for i in range(41)]
    net = nn.Sequential(*layers)
    with ModuleOutputs(net) as table:
        net(torch.zeros(1, 4))
    lines = table.lines()
    assert len(lines) == 1 + 30 + 1 and lines[-1] == "... 11 more rows"
