"""Bad input to export, predict and new: one line naming what is wrong, exit code 2, and
nothing written."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

import trainwell
from trainwell.config import load_config, to_dict

SMALL = ["data.name=synthetic", "data.kwargs.num_samples=128", "data.kwargs.shape=[8]",
         "model.name=mlp", "model.kwargs.hidden=[16]", "train.max_steps=2"]  # fmt: skip


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad")
    trainwell.fit(load_config(overrides=[*SMALL, f"run.dir={root / 'run'}"]))
    return root / "run"


def one_line(code: int, out: str, err: str, *expected: str) -> None:
    assert code == 2 and out == "", err
    assert err.startswith("trainwell: error: ") and len(err.strip().splitlines()) == 1, err
    for text in expected:
        assert text in err, err


def nothing_new(folder, before: set) -> None:
    assert {p.name for p in folder.iterdir()} == before


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
def test_a_corrupt_checkpoint(cli, tmp_path, fmt):
    (tmp_path / "junk.pt").write_bytes(b"\x00garbage" * 50)
    one_line(*cli("export", "junk.pt", "--format", fmt), "checkpoint junk.pt is corrupt")
    nothing_new(tmp_path, {"junk.pt"})


@pytest.mark.slow
def test_a_foreign_checkpoint_without_a_run_config(cli, tmp_path):
    torch.save({"model": torch.nn.Linear(2, 3).state_dict()}, tmp_path / "plain.pt")
    one_line(*cli("export", "plain.pt", "--format", "torchscript"), "holds no trainwell run config")
    one_line(*cli("predict", "plain.pt"), "holds no trainwell run config")
    nothing_new(tmp_path, {"plain.pt"})


@pytest.mark.slow
def test_weights_that_do_not_fit_the_model_the_config_builds(cli, tmp_path):
    cfg = to_dict(load_config(overrides=SMALL))
    torch.save({"model": {"w": torch.zeros(2)}, "config": cfg}, tmp_path / "other.pt")
    one_line(*cli("export", "other.pt", "--format", "torchscript"), "do not fit the model 'mlp'")


@pytest.mark.slow
def test_a_run_whose_model_code_no_longer_imports(cli, tmp_path, monkeypatch, capsys):
    (tmp_path / "old_net.py").write_text(
        "from trainwell.models import mlp\n\ndef net(input_shape, num_classes):\n"
        "    return mlp(num_classes, input_shape, hidden=[8])\n"
    )
    data = [o for o in SMALL if not o.startswith("model.")]
    trainwell.fit(load_config(overrides=[*data, "model.name=old_net:net", "run.dir=r"]))
    capsys.readouterr()  # the run's own output
    (tmp_path / "old_net.py").unlink()
    monkeypatch.delitem(sys.modules, "old_net")
    for args in (("export", "r", "--format", "onnx"), ("predict", "r", "--split", "val")):
        one_line(*cli(*args), "the run's code no longer imports", "old_net")
    assert not list((tmp_path / "r" / "checkpoints").glob("best.*[!t]"))  # only best.pt


@pytest.mark.slow
@pytest.mark.parametrize(
    ("array", "expected"),
    [
        (
            np.zeros((3, 5), dtype=np.float32),
            "has shape (3, 5); the model takes input of shape (N, 8)",
        ),
        (np.zeros((3, 8), dtype=np.int64), "holds int64 values; the model takes input as float32"),
        (np.full((3, 8), "a"), "holds <U1 values"),
        (np.zeros((0, 8), dtype=np.float32), "holds no samples"),
    ],
)
def test_an_input_of_the_wrong_shape_or_dtype(cli, tmp_path, run, array, expected):
    np.save(tmp_path / "x.npy", array)
    one_line(*cli("predict", str(run), "x.npy", "--out", "p.csv"), expected)
    nothing_new(tmp_path, {"x.npy"})


@pytest.mark.slow
def test_an_input_that_is_not_an_npy_array(cli, tmp_path, run):
    (tmp_path / "x.npy").write_text("1,2,3\n")
    one_line(*cli("predict", str(run), "x.npy"), "INPUT x.npy is not a NumPy .npy file")
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    one_line(*cli("predict", str(run), "obj.npy"), "holds Python objects")
    np.savez(tmp_path / "x.npz", a=np.zeros(3))
    one_line(*cli("predict", str(run), "x.npz"), "is an .npz archive")
    one_line(*cli("predict", str(run), "missing.npy"), "INPUT missing.npy does not exist")


@pytest.mark.slow
def test_predict_argument_mistakes(cli, tmp_path, run):
    np.save(tmp_path / "x.npy", np.zeros((2, 8), dtype=np.float32))
    one_line(*cli("predict", str(run), "x.npy", "--split", "val"), "not both")
    one_line(*cli("predict", str(run)), "has no test split; use --split train or val")
    one_line(*cli("predict", "nowhere"), "nowhere does not exist")


@pytest.mark.slow
def test_an_output_in_a_missing_folder(cli, tmp_path, run):
    one_line(*cli("export", str(run), "--format", "torchscript", "--out", "no/dir/m.pt"),
             "the folder no/dir does not exist")  # fmt: skip
    one_line(*cli("predict", str(run), "--split", "val", "--out", "no/p.csv"),
             "the folder no does not exist")  # fmt: skip
    nothing_new(tmp_path, set())


@pytest.mark.slow
def test_an_opset_that_is_not_one(cli, run):
    one_line(*cli("export", str(run), "--format", "onnx", "--opset", "3"), "--opset")


def test_new_refuses_a_folder_that_is_not_empty_or_not_a_folder(cli, tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    one_line(*cli("new", "full"), "full is not empty")
    assert [p.name for p in (tmp_path / "full").iterdir()] == ["keep.txt"]
    (tmp_path / "file").write_text("x")
    one_line(*cli("new", "file"), "exists and is not a folder")
    nothing_new(tmp_path, {"full", "file"})
