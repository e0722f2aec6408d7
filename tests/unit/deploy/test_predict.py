"""trainwell predict: the same numbers from a run, its ONNX file and its TorchScript file;
an ONNX file predicts without the model's code."""

from __future__ import annotations

import shutil
import sys

import numpy as np
import pytest
import torch

import trainwell
from tests.conftest import run_subprocess
from trainwell.predict import predict

USER_MODEL = """
from torch import nn


def make(input_shape=(8,), num_classes=4):
    return nn.Sequential(nn.Linear(input_shape[0], 32), nn.ReLU(), nn.Linear(32, num_classes))
"""
SYNTHETIC = ["data.name=synthetic", "data.kwargs.num_samples=256", "data.kwargs.shape=[8]",
             "data.kwargs.num_classes=4", "train.max_steps=5"]  # fmt: skip


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A CNN run on the digits with its ONNX (written by a real CLI process) and
    TorchScript exports; a user-model run whose code is deleted once exported."""
    root = tmp_path_factory.mktemp("predict")
    (root / "gone_model.py").write_text(USER_MODEL)
    sys.path.insert(0, str(root))
    try:
        trainwell.fit(
            trainwell.load_config(
                overrides=["train.max_steps=20", f"run.dir={root / 'cnn'}", "train.precision=fp32"]
            )
        )
        trainwell.fit(
            trainwell.load_config(
                overrides=[*SYNTHETIC, "model.name=gone_model:make", f"run.dir={root / 'user'}"]
            )
        )
        code = "tests.tasks_code"
        trainwell.fit(
            trainwell.load_config(
                overrides=[
                    f"data.name={code}:make_regression",
                    f"model.name={code}:make_regressor",
                    f"train.step={code}:regression_step",
                    "train.max_steps=5",
                    f"run.dir={root / 'reg'}",
                ]
            )
        )
    finally:
        sys.path.remove(str(root))
        sys.modules.pop("gone_model", None)
    for name in ("cnn", "user"):
        proc = run_subprocess(["export", name, "--format", "onnx", "--out", f"{name}.onnx"], root)
        assert proc.returncode == 0, proc.stderr[-2000:]
    from trainwell.export import to_torchscript

    to_torchscript(root / "cnn", root / "cnn.torchscript")
    (root / "gone_model.py").unlink()  # the model code is gone; the ONNX file needs none
    shutil.rmtree(root / "__pycache__", ignore_errors=True)
    return root


@pytest.mark.slow
def test_run_onnx_and_torchscript_give_the_same_predictions(exported):
    results = [predict(exported / name, split="test")
               for name in ("cnn", "cnn.onnx", "cnn.torchscript")]  # fmt: skip
    labels = [r.labels for r in results]
    assert len(labels[0]) == 270 and labels[0] == labels[1] == labels[2]
    assert results[0].accuracy == results[1].accuracy == results[2].accuracy > 0.3
    assert [r.kind for r in results] == ["run", "onnx", "torchscript"]


@pytest.mark.slow
def test_the_cli_prints_accuracy_and_a_confusion_matrix(cli, exported):
    code, out, err = cli("predict", str(exported / "cnn.onnx"), "--split", "test")
    assert code == 0, err
    assert "accuracy: " in out and "(rows: label, columns: prediction)" in out
    matrix = [line.split()[1:] for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert len(matrix) == 10 and sum(int(v) for row in matrix for v in row) == 270


@pytest.mark.slow
def test_an_npy_gives_the_labels_of_the_same_samples(tmp_path, exported):
    from trainwell.data.digits import load_digits_splits

    _, _, test = load_digits_splits()
    x = torch.stack([test[i][0] for i in range(5)]).numpy()
    np.save(tmp_path / "x.npy", x.astype(np.float64))  # float64 is cast to the model's float32
    split = predict(exported / "cnn.torchscript", split="test").labels[:5]
    for source in ("cnn", "cnn.onnx", "cnn.torchscript"):
        assert predict(exported / source, tmp_path / "x.npy").labels == split
    assert predict(exported / "cnn.onnx", x[0]).labels == split[:1]  # one sample, no batch axis


@pytest.mark.slow
def test_predictions_are_written_as_csv(cli, tmp_path, exported):
    code, out, err = cli("predict", str(exported / "cnn"), "--out", "preds.csv")
    assert code == 0, err
    lines = (tmp_path / "preds.csv").read_text().splitlines()
    assert lines[0] == "index,prediction,label" and len(lines) == 271
    assert [p.name for p in tmp_path.iterdir()] == ["preds.csv"]


@pytest.mark.slow
def test_an_onnx_file_predicts_without_the_model_code(tmp_path, exported):
    np.save(tmp_path / "x.npy", np.ones((3, 8), dtype=np.float32))
    proc = run_subprocess(["predict", str(exported / "user.onnx"), str(tmp_path / "x.npy")],
                          exported)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines() if line.strip()[:1].isdigit()]
    assert [r[0] for r in rows] == ["0", "1", "2"] and len({r[1] for r in rows}) == 1
    proc = run_subprocess(["predict", "user", str(tmp_path / "x.npy")], exported)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "no longer imports" in proc.stderr and "gone_model" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_regression_reports_mae_and_rmse(cli, exported):
    code, out, err = cli("predict", str(exported / "reg"), "--split", "val")
    assert code == 0, err
    assert "mae: " in out and "rmse: " in out


@pytest.mark.slow
def test_the_python_api_on_an_array(exported):
    x = np.zeros((2, 1, 8, 8), dtype=np.float32)
    result = predict(exported / "cnn.onnx", x)
    assert len(result.labels) == 2 and all(isinstance(v, int) for v in result.labels)
    assert result.accuracy is None  # no targets


def test_predict_is_on_the_package_as_the_issue_names_it():
    import trainwell
    from trainwell.predict import predict as the_function

    assert trainwell.predict is the_function and callable(trainwell.predict)
