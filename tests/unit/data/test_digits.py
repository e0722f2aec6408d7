"""The digits load without scikit-learn's code, split exactly as scikit-learn splits them."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from trainwell.data import digits as digits_module
from trainwell.data.digits import SPLIT_SEED, TEST_SHARE, VAL_SHARE, load_digits_splits
from trainwell.errors import UserError


def test_the_stored_split_is_the_one_scikit_learn_draws_bit_for_bit():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images, labels = digits.images.astype(np.float32) / 16.0, digits.target.astype(np.int64)
    x_rest, x_test, y_rest, y_test = train_test_split(
        images,
        labels,
        test_size=TEST_SHARE,
        stratify=labels,
        random_state=SPLIT_SEED,
    )
    x_train, x_val, y_train, y_val = train_test_split(
        x_rest,
        y_rest,
        test_size=VAL_SHARE / (1 - TEST_SHARE),
        stratify=y_rest,
        random_state=SPLIT_SEED,
    )
    mean, std = float(x_train.mean()), float(x_train.std())
    expected = [(x_train, y_train), (x_val, y_val), (x_test, y_test)]
    for (x, y), split in zip(expected, load_digits_splits(), strict=True):
        inputs, targets = split.tensors
        assert torch.equal(inputs, torch.from_numpy((x - mean) / std).unsqueeze(1))
        assert torch.equal(targets, torch.from_numpy(y))
    # Disjoint, and every image in one split.
    from trainwell.data.digits_split import TEST, TRAIN, VAL

    rows = [int(r) for order in (TRAIN, VAL, TEST) for r in order.split()]
    assert sorted(rows) == list(range(len(labels)))


def test_loading_them_imports_no_scikit_learn():
    code = ("import sys; from trainwell.data.digits import load_digits_splits; "
            "load_digits_splits(); print('sklearn' in sys.modules)")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_without_scikit_learn_the_digits_are_one_clear_line(monkeypatch):
    monkeypatch.setattr(digits_module.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(UserError, match=r"^data.name=digits: .*pip install scikit-learn$"):
        load_digits_splits()
