"""The classification template: an MLP on Gaussian clusters the data module makes."""

from __future__ import annotations

PREDICT_NOTE = "accuracy and a confusion matrix"

CONFIG = """\
# trainwell train --config configs/default.yaml   (overrides: KEY=VALUE, e.g. optim.lr=1e-3)
data:
  name: "src.${pkg}.data:make_data"
  batch_size: 64
model:
  name: "src.${pkg}.model:Classifier"
  kwargs: {hidden: 64}
train:
  epochs: 5
  loss: cross_entropy
optim:
  lr: 3.0e-3
"""

DATA = '''\
"""Points around one centre per class, in a few dimensions: easy to learn, made on the fly.

Replace `Clusters` with your own `Dataset`; keep `make_data` returning
(train, val, test). `targets` lets trainwell count the classes.
"""

import torch
from torch.utils.data import Dataset

NUM_FEATURES = 16
NUM_CLASSES = 4


class Clusters(Dataset):
    def __init__(self, n: int, seed: int):
        g = torch.Generator().manual_seed(0)  # the same centres in every split
        centres = 2.0 * torch.randn(NUM_CLASSES, NUM_FEATURES, generator=g)
        g.manual_seed(seed)
        self.targets = torch.randint(NUM_CLASSES, (n,), generator=g)
        noise = torch.randn(n, NUM_FEATURES, generator=g)
        self.inputs = centres[self.targets] + noise

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, i):
        return self.inputs[i], self.targets[i]


def make_data(n_train: int = 1024, n_val: int = 256, n_test: int = 256):
    return Clusters(n_train, seed=1), Clusters(n_val, seed=2), Clusters(n_test, seed=3)
'''

MODEL = '''\
"""The model: a plain nn.Module. trainwell passes input_shape and num_classes from the data."""

import math

from torch import nn


class Classifier(nn.Module):
    def __init__(self, input_shape=(16,), num_classes: int = 4, hidden: int = 64):
        super().__init__()
        self.net = nn.Sequential(
            nn.Flatten(),
            nn.Linear(math.prod(input_shape), hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x):  # (N, features) -> (N, num_classes) logits
        return self.net(x)
'''

TEST_MODEL = '''\
"""The model's own checks: shapes, and that it can learn at all (overfit one batch)."""

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from src.${pkg}.data import NUM_CLASSES, NUM_FEATURES, make_data
from src.${pkg}.model import Classifier


def first_batch(size=16):
    train, _, _ = make_data(n_train=size, n_val=1, n_test=1)
    return next(iter(DataLoader(train, batch_size=size)))


def test_one_batch_goes_through():
    x, y = first_batch()
    out = Classifier((NUM_FEATURES,), NUM_CLASSES)(x)
    assert out.shape == (len(x), NUM_CLASSES)
    assert torch.isfinite(out).all()


def test_overfits_one_batch():
    # A model that cannot drive the loss of 16 samples to ~0 has a bug (wiring, loss,
    # labels), whatever the data: the first check to run when training goes wrong.
    torch.manual_seed(0)
    x, y = first_batch()
    model = Classifier((NUM_FEATURES,), NUM_CLASSES)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(150):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    assert loss.item() < 0.05
'''

STEP = None
