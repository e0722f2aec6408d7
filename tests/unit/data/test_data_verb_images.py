"""``trainwell data`` on image data sets: per-channel statistics and the sample grid, on
Fashion-MNIST read from local IDX files and on user images (channels first and last)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.unit.data.test_data_verb import user_module
from tests.unit.data.test_fashion_mnist import write_fashion

PNG = b"\x89PNG\r\n\x1a\n"


def run(cli, tmp_path, *args):
    code, out, err = cli("data", *args, "--out", "look", "--json", "look/data.json")
    assert code == 0, err
    return json.loads((tmp_path / "look" / "data.json").read_text()), out


@pytest.mark.slow
@pytest.mark.parametrize("n_train,side", [(60, 28), (120, 12)])
def test_fashion_mnist_from_local_files(cli, tmp_path, n_train, side):
    arrays = write_fashion(tmp_path / "fm", n_train=n_train, n_test=30, height=side, width=side)
    report, out = run(cli, tmp_path, "data.name=fashion_mnist", "data.root=fm")
    splits = report["splits"]
    labels = next(a for k, a in arrays.items() if "train-labels" in k)
    test_labels = next(a for k, a in arrays.items() if "t10k-labels" in k)
    assert splits["train"]["size"] + splits["val"]["size"] == n_train
    assert splits["test"]["size"] == 30
    merged = {}
    for name in ("train", "val"):
        for k, v in splits[name]["label_counts"].items():
            merged[k] = merged.get(k, 0) + v
    assert merged == {str(k): int((labels == k).sum()) for k in np.unique(labels)}
    assert splits["test"]["label_counts"] == {
        str(k): int((test_labels == k).sum()) for k in np.unique(test_labels)}  # fmt: skip
    assert splits["train"]["inputs"]["shape"] == [1, side, side]
    # standardized with train's own statistics
    assert splits["train"]["inputs"]["mean"] == pytest.approx(0, abs=1e-5)
    assert splits["train"]["inputs"]["std"] == pytest.approx(1, abs=1e-4)
    for name in ("train", "val", "test"):
        png = tmp_path / "look" / f"samples_{name}.png"
        assert png.read_bytes()[:8] == PNG
        assert str(png.relative_to(tmp_path)) in report["grids"]
        assert f"wrote look/samples_{name}.png" in out


RGB = """
    import torch
    from torch.utils.data import Dataset

    MEANS = (0.0, 5.0, -5.0)

    class Colours(Dataset):
        def __init__(self, n=120, last=False):
            g = torch.Generator().manual_seed(1)
            x = torch.randn(n, 3, 16, 16, generator=g)
            self.x = x + torch.tensor(MEANS).view(1, 3, 1, 1)
            self.targets = torch.arange(n) % 5
            self.last = last
        def __len__(self):
            return len(self.x)
        def __getitem__(self, i):
            x = self.x[i].permute(1, 2, 0) if self.last else self.x[i]
            return x, self.targets[i]
"""


@pytest.mark.slow
@pytest.mark.parametrize("last", [False, True])
def test_colour_images_get_statistics_per_channel(cli, tmp_path, last):
    mod = user_module(tmp_path, RGB)
    report, out = run(cli, tmp_path, f"data.name={mod}:Colours", f"data.kwargs.last={last}")
    from importlib import import_module

    from trainwell.data import split_off

    train, _ = split_off(import_module(mod).Colours(), 0.1)
    x = import_module(mod).Colours().x[train.indices].double()
    channels = report["splits"]["train"]["inputs"]["channels"]
    assert len(channels) == 3
    for c in range(3):
        assert channels[c]["mean"] == pytest.approx(float(x[:, c].mean()), abs=1e-9)
        assert channels[c]["std"] == pytest.approx(float(x[:, c].std(unbiased=False)), rel=1e-9)
        assert channels[c]["min"] == pytest.approx(float(x[:, c].min()), abs=1e-6)
    assert "channel 2" in out
    png = tmp_path / "look" / "samples_train.png"
    assert png.read_bytes()[:8] == PNG
    import matplotlib.image

    height, width = matplotlib.image.imread(png).shape[:2]
    assert height > 100 and width > 100  # five classes, a row each


@pytest.mark.slow
def test_no_grid_for_data_that_are_not_images(cli, tmp_path):
    report, out = run(cli, tmp_path, "data.name=synthetic", "data.kwargs.shape=[12]",
                      "data.kwargs.num_samples=100")  # fmt: skip
    assert report["grids"] == [] and not list((tmp_path / "look").glob("*.png"))
    assert "channels" not in report["splits"]["train"]["inputs"]


@pytest.mark.slow
def test_grid_of_unlabelled_images(cli, tmp_path):
    mod = user_module(tmp_path, """
        import torch

        def images(n=40):
            g = torch.Generator().manual_seed(0)
            return [torch.rand(1, 10, 10, generator=g) for _ in range(n)]
    """)  # fmt: skip
    # a plain list of tensors: no labels, one input; trained with a step function
    report, _ = run(cli, tmp_path, f"data.name={mod}:images", "data.val_fraction=0.25")
    assert report["splits"]["train"]["label_counts"] is None
    assert report["splits"]["train"]["inputs"]["shape"] == [1, 10, 10]
    assert (tmp_path / "look" / "samples_train.png").read_bytes()[:8] == PNG
