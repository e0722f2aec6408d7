"""scikit-learn's bundled handwritten digits: 1,797 8x8 images, ten classes, no download."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import TensorDataset

# Fixed, stratified 70/15/15 split: the same for every run, whatever run.seed says, so
# that runs are compared on the same validation and test images.
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
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = digits.images.astype(np.float32) / 16.0
    labels = digits.target.astype(np.int64)
    x_rest, x_test, y_rest, y_test = train_test_split(
        images, labels, test_size=TEST_SHARE, stratify=labels, random_state=SPLIT_SEED
    )
    x_train, x_val, y_train, y_val = train_test_split(
        x_rest,
        y_rest,
        test_size=VAL_SHARE / (1 - TEST_SHARE),
        stratify=y_rest,
        random_state=SPLIT_SEED,
    )
    mean, std = float(x_train.mean()), float(x_train.std())

    def to_dataset(x: np.ndarray, y: np.ndarray) -> TensorDataset:
        xs = torch.from_numpy((x - mean) / std).unsqueeze(1)
        return TensorDataset(xs, torch.from_numpy(y))

    return to_dataset(x_train, y_train), to_dataset(x_val, y_val), to_dataset(x_test, y_test)
