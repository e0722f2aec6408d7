"""scikit-learn's bundled handwritten digits: 1,797 8x8 images, ten classes, no download."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import TensorDataset

from trainwell.data.digits_split import TEST, TRAIN, VAL
from trainwell.errors import UserError

# Fixed, stratified 70/15/15 split: the same for every run, whatever run.seed says, so
# that runs are compared on the same validation and test images. How the split stored in
# digits_split.py was drawn (tests/unit/data/test_digits.py draws it again with these).
SPLIT_SEED = 0
VAL_SHARE = 0.15
TEST_SHARE = 0.15


def load_digits_splits() -> tuple[TensorDataset, TensorDataset, TensorDataset]:
    """Return (train, val, test) splits of the digits as float32 [N, 1, 8, 8] and int64.

    Inputs are standardized with the training split's mean and standard deviation.

    Example:
        >>> train, val, test = load_digits_splits()
        >>> len(train), len(val), len(test)
        (1257, 270, 270)
    """
    rows = np.loadtxt(digits_file(), delimiter=",")  # 64 pixels (0-16), then the label
    images = rows[:, :-1].reshape(-1, 8, 8).astype(np.float32) / 16.0
    labels = rows[:, -1].astype(np.int64)
    train, val, test = (np.array(order.split(), dtype=np.int64) for order in (TRAIN, VAL, TEST))
    mean, std = float(images[train].mean()), float(images[train].std())

    def to_dataset(rows: np.ndarray) -> TensorDataset:
        xs = torch.from_numpy((images[rows] - mean) / std).unsqueeze(1)
        return TensorDataset(xs, torch.from_numpy(labels[rows]))

    return to_dataset(train), to_dataset(val), to_dataset(test)


def digits_file() -> Path:
    """scikit-learn's ``digits.csv.gz``, found without importing scikit-learn.

    Example:
        >>> digits_file().name
        'digits.csv.gz'
    """
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("data.name=digits: the digits come with scikit-learn; "
                        "pip install scikit-learn")  # fmt: skip
    path = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data" / "digits.csv.gz"
    if not path.is_file():
        raise UserError(f"data.name=digits: {path} is missing; reinstall scikit-learn")
    return path
