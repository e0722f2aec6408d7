"""The task examples of examples/tasks/ train end to end through the CLI, and learn.

Each test runs ``trainwell train --config X.yaml`` from examples/tasks/ (the folder the
README tells people to run it from, so "module:fn" import paths resolve), then reads the
run's metrics.csv: the step's metrics are logged under their names for the train and val
splits, the training loss falls, and the validation metric beats what guessing gets.
The regression example runs through the installed console script, a real process; the
others through the same entry point (``trainwell.cli:main``) in this process, which is
what they are about (the tasks, not the launch), at a fraction of a process's start-up.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

from tests.conftest import is_machine_metric
from trainwell.cli import main

REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "examples" / "tasks"
TRAINWELL = Path(sys.executable).with_name("trainwell")  # the console script beside python

pytestmark = pytest.mark.slow


def read_run(run_dir: Path) -> list[dict]:
    """The finished run's metrics.csv rows (value a float), once its summary says completed."""
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed", summary
    with open(run_dir / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        row["step"], row["value"] = int(row["step"]), float(row["value"])
    return rows


def train_process(tmp_path: Path, config: str, *overrides: str) -> list[dict]:
    """Run the example's config through the console script, a process of its own."""
    run_dir = tmp_path / "run"
    args = [str(TRAINWELL), "train", "--config", config, f"run.dir={run_dir}",
            "train.precision=fp32", *overrides]  # fmt: skip
    # The models are tiny: one thread is fastest, and two OpenMP threads on a busy 2-core
    # machine made the same steps 10-40 times slower.
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(args, cwd=TASKS, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return read_run(run_dir)


@pytest.fixture
def train(monkeypatch, capsys):
    """``train(folder, config, *overrides)``: the same command in this process, from
    examples/tasks/, on one thread; the examples' modules are forgotten afterwards."""
    monkeypatch.chdir(TASKS)
    monkeypatch.syspath_prepend(str(TASKS))  # restored after (the CLI adds the cwd too)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    before = set(sys.modules)

    def run(tmp_path: Path, config: str, *overrides: str) -> list[dict]:
        run_dir = tmp_path / "run"
        code = main(["train", "--config", config, f"run.dir={run_dir}",
                     "train.precision=fp32", *overrides])  # fmt: skip
        out, err = capsys.readouterr()
        assert code == 0, f"exit {code}\n{out}\n{err}"
        return read_run(run_dir)

    yield run
    torch.set_num_threads(threads)
    for name in set(sys.modules) - before:
        if str(getattr(sys.modules[name], "__file__", None) or "").startswith(str(TASKS)):
            del sys.modules[name]


def names(rows: list[dict]) -> set[tuple[str, str]]:
    return {(r["split"], r["name"]) for r in rows}


def series(rows: list[dict], split: str, name: str) -> list[float]:
    values = [r["value"] for r in sorted(rows, key=lambda r: r["step"])
              if r["split"] == split and r["name"] == name]  # fmt: skip
    assert values, f"no {split}/{name} rows in metrics.csv"
    return values


def final(rows: list[dict], split: str, name: str) -> float:
    return series(rows, split, name)[-1]


def assert_loss_fell(rows: list[dict]) -> None:
    loss = series(rows, "train", "loss")
    assert len(loss) >= 2, loss
    assert loss[-1] < 0.5 * loss[0], f"train loss went from {loss[0]:.4f} to {loss[-1]:.4f}"


def example(name: str) -> ModuleType:
    """Import examples/tasks/<name>.py (to compute what guessing would score on its data)."""
    spec = importlib.util.spec_from_file_location(f"task_example_{name}", TASKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_regression_mse_loss_and_mae_metric(tmp_path):
    rows = train_process(tmp_path, "regression.yaml")
    assert {("train", "loss"), ("train", "mae"), ("val", "loss"), ("val", "mae")} <= names(rows)
    assert_loss_fell(rows)
    _, val = example("regression").make_data()
    y = val.tensors[1]
    guess = (y - y.median()).abs().mean().item()  # the MAE of the best constant guess
    assert final(rows, "val", "mae") < 0.5 * guess, guess


@pytest.mark.slow
def test_char_lm_padded_dict_batches_and_perplexity(train, tmp_path):
    rows = train(tmp_path, "char_lm.yaml")
    assert {("train", "ppl"), ("val", "ppl"), ("val", "loss")} <= names(rows)
    assert_loss_fell(rows)
    # Guessing uniformly among the 28 characters: perplexity 28; letter frequencies
    # alone: about 12. The text's words make about 2 reachable.
    assert final(rows, "val", "ppl") < 4.0


@pytest.mark.slow
def test_segmentation_ignore_index_and_pixel_accuracy(train, tmp_path):
    rows = train(tmp_path, "segmentation.yaml")
    assert {("train", "pixel_acc"), ("val", "pixel_acc"), ("val", "loss")} <= names(rows)
    assert_loss_fell(rows)
    seg = example("segmentation")
    _, val = seg.make_data()
    graded = val.tensors[1][val.tensors[1] != seg.IGNORE]
    majority = torch.bincount(graded).max().item() / graded.numel()  # all "background"
    # At least halves the errors of calling every pixel the most common class.
    assert final(rows, "val", "pixel_acc") > majority + (1 - majority) / 2, majority


@pytest.mark.slow
def test_two_inputs(train, tmp_path):
    rows = train(tmp_path, "two_inputs.yaml")
    assert {("train", "accuracy"), ("val", "accuracy"), ("val", "loss")} <= names(rows)
    assert_loss_fell(rows)
    assert final(rows, "val", "accuracy") > 0.8  # 4 classes: chance 0.25, majority 0.30


@pytest.mark.slow
def test_multilabel_pos_weight_from_config_and_f1_from_step(train, tmp_path):
    # The config alone: the default step with train.loss and train.loss_kwargs.pos_weight.
    default = train(tmp_path / "default", "multilabel.yaml")
    # Besides the machine's rows and the optimizer's (lr, grad_norm): the loss only.
    logged = {(s, n) for s, n in names(default) if not is_machine_metric(n)}
    optimizer = {("train", "lr"), ("train", "grad_norm")}
    assert {("train", "loss"), ("val", "loss")} == logged - optimizer
    assert_loss_fell(default)
    # The same run with the example's step, which adds per-sample F1 and exact match.
    stepped = train(tmp_path / "step", "multilabel.yaml", "train.step=multilabel:step")
    assert {("train", "f1"), ("val", "f1"), ("train", "exact_match"),
            ("val", "exact_match")} <= names(stepped)  # fmt: skip
    assert_loss_fell(stepped)
    # Predicting no label at all gets exact match and F1 of 0.33 here (the share of samples
    # without any label).
    assert final(stepped, "val", "exact_match") > 0.6
    assert final(stepped, "val", "f1") > 0.75
    # The step hard-codes the pos_weight the YAML gives the default step: same loss, so
    # the YAML's train.loss_kwargs reached the loss.
    assert final(stepped, "val", "loss") == pytest.approx(final(default, "val", "loss"), rel=1e-3)


@pytest.mark.slow
def test_custom_topk_metric(train, tmp_path):
    rows = train(tmp_path, "topk.yaml")
    assert {("train", "top5"), ("val", "top1"), ("val", "top5")} <= names(rows)
    assert_loss_fell(rows)
    top1, top5 = final(rows, "val", "top1"), final(rows, "val", "top5")
    # 20 classes: guessing gets top-1 0.05 and top-5 0.25.
    assert top1 > 0.5
    assert top5 > 0.9
    assert top5 >= top1
