"""Tiny shared pieces for the corpus scripts (data and a model), kept out of the way."""

import torch
from torch import nn


def batches(n=40, batch=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n * batch, 8, generator=g)
    y = (x[:, 0] > 0).long()
    return [(x[i : i + batch], y[i : i + batch]) for i in range(0, n * batch, batch)]


def net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
