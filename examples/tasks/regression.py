"""Regression: MSE as the loss, mean absolute error logged as a metric.

    cd examples/tasks && trainwell train --config regression.yaml
"""

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset


def make_data(n: int = 2048, features: int = 8, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    w = torch.randn(features, 1, generator=g) / features**0.5
    # A smooth nonlinear target, plus a little noise: y has shape (N, 1) like the output.
    y = torch.sin(2 * x @ w) + 0.5 * x[:, :1] ** 2 + 0.05 * torch.randn(n, 1, generator=g)
    split = n * 3 // 4
    return TensorDataset(x[:split], y[:split]), TensorDataset(x[split:], y[split:])


def make_model(features: int = 8, hidden: int = 64) -> nn.Module:
    return nn.Sequential(nn.Linear(features, hidden), nn.ReLU(),
                         nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))


def step(model, batch):
    x, y = batch
    pred = model(x)
    return {"loss": F.mse_loss(pred, y), "mae": (pred - y).abs().mean().detach()}
