"""The regression template: an MLP fitting a smooth function of its inputs, MSE loss."""

from __future__ import annotations

PREDICT_NOTE = "MAE and RMSE against the targets"

CONFIG = """\
# trainwell train --config configs/default.yaml   (overrides: KEY=VALUE, e.g. optim.lr=1e-3)
data:
  name: "src.${pkg}.data:make_data"
  batch_size: 64
model:
  name: "src.${pkg}.model:Regressor"
  kwargs: {hidden: 64}
train:
  epochs: 5
  loss: mse
optim:
  lr: 3.0e-3
"""

DATA = '''\
"""A smooth nonlinear target of a few features, plus a little noise, made on the fly.

Replace `Curve` with your own `Dataset`; keep `make_data` returning (train, val, test).
Targets have the model's output shape, (N, 1): MSE would silently broadcast (N,).
"""

import torch
from torch.utils.data import Dataset

NUM_FEATURES = 8


class Curve(Dataset):
    def __init__(self, n: int, seed: int):
        g = torch.Generator().manual_seed(0)  # the same function in every split
        w = torch.randn(NUM_FEATURES, 1, generator=g) / NUM_FEATURES**0.5
        g.manual_seed(seed)
        self.inputs = torch.randn(n, NUM_FEATURES, generator=g)
        clean = torch.sin(2 * self.inputs @ w) + 0.5 * self.inputs[:, :1] ** 2
        self.targets = clean + 0.05 * torch.randn(n, 1, generator=g)

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, i):
        return self.inputs[i], self.targets[i]


def make_data(n_train: int = 2048, n_val: int = 256, n_test: int = 256):
    return Curve(n_train, seed=1), Curve(n_val, seed=2), Curve(n_test, seed=3)
'''

MODEL = '''\
"""The model: a plain nn.Module. trainwell passes input_shape from the data."""

import math

from torch import nn


class Regressor(nn.Module):
    def __init__(self, input_shape=(8,), hidden: int = 64):
        super().__init__()
        self.net = nn.Sequential(
            nn.Flatten(),
            nn.Linear(math.prod(input_shape), hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, 1),
        )

    def forward(self, x):  # (N, features) -> (N, 1)
        return self.net(x)
'''

TEST_MODEL = '''\
"""The model's own checks: shapes, and that it can learn at all (overfit one batch)."""

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from src.${pkg}.data import NUM_FEATURES, make_data
from src.${pkg}.model import Regressor


def first_batch(size=16):
    train, _, _ = make_data(n_train=size, n_val=1, n_test=1)
    return next(iter(DataLoader(train, batch_size=size)))


def test_one_batch_goes_through():
    x, y = first_batch()
    out = Regressor((NUM_FEATURES,))(x)
    assert out.shape == y.shape  # (N, 1) against (N, 1): nothing broadcasts in the loss
    assert torch.isfinite(out).all()


def test_overfits_one_batch():
    # A model that cannot fit 16 samples almost exactly has a bug (wiring, loss, shapes).
    torch.manual_seed(0)
    x, y = first_batch()
    model = Regressor((NUM_FEATURES,))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(300):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    assert loss.item() < 1e-3
'''

STEP = None
