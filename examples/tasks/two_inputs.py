"""A model with two inputs: samples ((x_a, x_b), y), each input with its own branch.

    cd examples/tasks && trainwell train --config two_inputs.yaml
"""

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset


class Pairs(Dataset):
    """The class depends on both inputs: neither alone is enough to predict it well."""

    def __init__(self, n: int, seed: int, classes: int = 4):
        g = torch.Generator().manual_seed(0)  # the same rule for every split
        a_to_class = torch.randn(8, classes, generator=g)
        b_to_class = torch.randn(5, classes, generator=g)
        g = torch.Generator().manual_seed(seed)
        self.x_a = torch.randn(n, 8, generator=g)  # e.g. a measurement
        self.x_b = torch.randn(n, 5, generator=g)  # e.g. metadata of another kind
        self.y = (self.x_a @ a_to_class + self.x_b @ b_to_class).argmax(dim=1)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return (self.x_a[i], self.x_b[i]), self.y[i]


def make_data(n_train: int = 2048, n_val: int = 512):
    return Pairs(n_train, seed=1), Pairs(n_val, seed=2)


class TwoBranch(nn.Module):
    def __init__(self, num_classes: int = 4, hidden: int = 32):
        super().__init__()
        self.branch_a = nn.Sequential(nn.Linear(8, hidden), nn.ReLU())
        self.branch_b = nn.Sequential(nn.Linear(5, hidden), nn.ReLU())
        self.head = nn.Linear(2 * hidden, num_classes)

    def forward(self, x_a, x_b):
        return self.head(torch.cat([self.branch_a(x_a), self.branch_b(x_b)], dim=1))


def step(model, batch):
    (x_a, x_b), y = batch
    logits = model(x_a, x_b)
    return {"loss": F.cross_entropy(logits, y), "accuracy": (logits.argmax(1) == y).float().mean()}
